// Polling a condition with a deadline, the one wait of the suites, benches and demo: the machine is shared and loaded,
// so deadlines are generous and a wait ends as soon as its condition holds.

/** How often a condition is polled: often enough that a wait ends soon after the condition holds. */
const POLL_MS = 50;
/** The default deadline: generous, because CI machines have 2 cores and other suites' clusters may be winding down. */
export const WAIT_MS = 45_000;

/** What a condition gives while it does not hold yet. */
type NotYet = undefined | null | false;

/**
 * Polls `check` until it gives a value (anything but undefined, null or false) and returns that value. A throw counts
 * as "not yet"; the last one ends the timeout's message. `what` names the condition in that message (a function: read
 * when the wait fails, so that output gathered meanwhile is in the message).
 */
export async function waitFor<T>(
  what: string | (() => string),
  check: () => T | Promise<T>,
  timeoutMs = WAIT_MS,
): Promise<Exclude<T, NotYet>> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined && value !== null && value !== false) return value as Exclude<T, NotYet>;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > deadline) {
      const named = typeof what === 'function' ? what() : what;
      const last = lastError
        ? ` (last error: ${lastError instanceof Error ? lastError.message : String(lastError)})`
        : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${named}${last}`);
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}
