// Maps Kubernetes API failures (client-node ApiException: .code, .body) and connection failures to one-line UserErrors.
import { UserError } from '../../shared/errors.js';
import { ApiTimeoutError } from './request-timeout.js';

export interface ApiCallContext {
  /** What devop was doing, e.g. "create the agent Job". */
  action: string;
  verb?: string;
  /** Resource as RBAC names it, e.g. "pods/portforward" or "jobs.batch". */
  resource?: string;
  namespace?: string;
  name?: string;
}

interface StatusBody {
  message?: string;
  reason?: string;
}

export function apiErrorCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

function statusBody(err: unknown): StatusBody {
  const body = (err as { body?: unknown } | null)?.body;
  if (typeof body === 'string') {
    try {
      return JSON.parse(body) as StatusBody;
    } catch {
      return { message: body };
    }
  }
  return (body && typeof body === 'object' ? body : {}) as StatusBody;
}

/** The API server's own sentence for a failed call (Status.message), or the error's message. */
export function apiErrorMessage(err: unknown): string {
  const body = statusBody(err);
  if (body.message) return body.message;
  return err instanceof Error ? err.message.split('\n')[0] : String(err);
}

const CONNECTION_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ETIMEDOUT', 'ECONNRESET', 'EAI_AGAIN']);

function connectionCode(err: unknown): string | undefined {
  let e: unknown = err;
  for (let depth = 0; depth < 5 && e; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && CONNECTION_CODES.has(code)) return code;
    e = (e as { cause?: unknown }).cause;
  }
  const text = err instanceof Error ? err.message : '';
  const match = /(ECONNREFUSED|ENOTFOUND|EHOSTUNREACH|ETIMEDOUT|ECONNRESET|EAI_AGAIN)/.exec(text);
  return match?.[1];
}

/** Turns an API failure into a UserError with the fix; errors that are not API errors pass through unchanged. */
export function mapApiError(err: unknown, ctx: ApiCallContext): unknown {
  if (err instanceof ApiTimeoutError) return err.during(ctx.action);
  if (err instanceof UserError) return err;
  const code = apiErrorCode(err);
  const where = ctx.namespace ? ` in namespace "${ctx.namespace}"` : '';
  const what = ctx.resource ? `${ctx.resource}${ctx.name ? ` "${ctx.name}"` : ''}` : (ctx.name ?? 'the object');
  switch (code) {
    case 401:
      return new UserError(
        `the API server rejected devop's credentials while trying to ${ctx.action}`,
        'refresh your login (the kubeconfig token or certificate has expired or is wrong)',
        { cause: err },
      );
    case 403:
      return new UserError(
        `forbidden: cannot ${ctx.verb ?? 'access'} ${ctx.resource ?? 'the resource'}${where} (needed to ${ctx.action})`,
        `ask a cluster admin for RBAC permission to "${ctx.verb ?? '…'}" on "${ctx.resource ?? '…'}"${where}, or use ` +
          `another --context`,
        { cause: err },
      );
    case 404:
      return new UserError(
        `${what} not found${where} (while trying to ${ctx.action})`,
        'check the name and -n/--namespace (`devop ls` lists targets)',
        { cause: err },
      );
    case 409:
      return new UserError(
        `${what} already exists${where} (while trying to ${ctx.action}): a devop agent from an earlier session is ` +
          `probably left over`,
        'run `devop clean` (or delete the leftover devop-agent Job) and try again',
        { cause: err },
      );
    case 422:
      return new UserError(
        `the API server refused to ${ctx.action}: ${apiErrorMessage(err)}`,
        'check the options (agent image, namespace, resources) and try again',
        { cause: err },
      );
    default:
      break;
  }
  const conn = connectionCode(err);
  if (conn) {
    return new UserError(
      `cannot reach the Kubernetes API server (${conn}) while trying to ${ctx.action}`,
      'check that the cluster is up and that the current context (--context) points at it',
      { cause: err },
    );
  }
  if (code !== undefined) {
    return new UserError(
      `the API server answered ${code} while trying to ${ctx.action}: ${apiErrorMessage(err)}`,
      'retry; if it keeps failing, run `devop doctor`',
      { cause: err },
    );
  }
  return err;
}

/** Runs one API call and maps its failure. */
export async function apiCall<T>(ctx: ApiCallContext, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    throw mapApiError(err, ctx);
  }
}
