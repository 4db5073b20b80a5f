// Requests to the stand-in's API for suites: read a client-node API error, send one raw HTTPS request.
import { readFileSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';

/** The Status body and HTTP code of a failed client-node call. */
export function statusOf(e: unknown): { code: number; reason?: string; message?: string; details?: any } {
  const err = e as { code?: number; body?: unknown };
  const body = typeof err.body === 'string' ? JSON.parse(err.body) : (err.body as any);
  return { code: err.code ?? 0, reason: body?.reason, message: body?.message, details: body?.details };
}

export async function expectStatus(
  p: Promise<unknown>,
): Promise<{ code: number; reason?: string; message?: string; details?: any }> {
  try {
    await p;
  } catch (e) {
    return statusOf(e);
  }
  throw new Error('expected the call to fail');
}

export interface RawAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  /** The body as JSON (a Status or an object), or undefined when it is not JSON. */
  body: any;
}

/**
 * One HTTPS request to the stand-in with exactly these bytes: a body is announced with its length; `headers` add to or
 * replace the bearer token and JSON content type.
 */
export function rawRequest(
  api: { server: string; caPath: string },
  token: string,
  method: string,
  path: string,
  body?: string | object,
  headers: Record<string, string | string[]> = {},
): Promise<RawAnswer> {
  const text = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      `${api.server}${path}`,
      {
        method,
        ca: readFileSync(api.caPath),
        headers: {
          authorization: `Bearer ${token}`,
          accept: 'application/json',
          ...(text === undefined
            ? {}
            : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }),
          ...headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const answer = Buffer.concat(chunks).toString();
          let json: unknown;
          try {
            json = JSON.parse(answer);
          } catch {
            // Not JSON (plain text or HTML answers): the text is the answer.
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text: answer, body: json });
        });
      },
    );
    req.on('error', reject);
    req.end(text);
  });
}
