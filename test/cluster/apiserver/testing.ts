// Helpers for the stand-in's own suites: poll a condition with a generous deadline, read a client-node API error.
export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined && v !== false) return v as T;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

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
