// The two kinds of failure devop reports — UserError (the user can fix it: message + hint) and BugError (ours) — and
// the one formatter the top-level handlers of the CLI and the agent use.

/** What a failure says, whatever was thrown: an Error's message, anything else as its String(). */
export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * A problem the user can fix. `message` names the problem, `hint` names the fix; printed as one line, never a stack.
 */
export class UserError extends Error {
  readonly hint: string;

  constructor(message: string, hint: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'UserError';
    this.hint = hint;
  }
}

/** A problem in devop itself (a broken invariant). Printed with its stack when --verbose is given. */
export class BugError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'BugError';
  }
}

/** True for a UserError, also one that crossed a module boundary (duck-typed on name + hint). */
export function isUserError(err: unknown): err is UserError {
  return (
    err instanceof UserError ||
    (err instanceof Error && err.name === 'UserError' && typeof (err as { hint?: unknown }).hint === 'string')
  );
}

/**
 * The text a top-level handler prints for `err` (without a trailing newline): always one line unless verbose.
 * UserError: `devop: <message> — fix: <hint>` (`devop: error [<step>]: …` when it carries a step); anything else:
 * `devop: internal error: <message> — run with -v for the stack`, or with verbose the stack (and causes) on the lines
 * that follow.
 */
export function formatError(err: unknown, verbose = false): string {
  if (isUserError(err)) {
    // A failure tied to a start-up step reads like the reporter's error lines: `devop: error [step]: …`.
    const step = (err as { step?: unknown }).step;
    const message = typeof step === 'string' ? `error [${step}]: ${oneLine(err.message)}` : oneLine(err.message);
    const line = err.hint ? `devop: ${message} — fix: ${oneLine(err.hint)}` : `devop: ${message}`;
    return verbose && err.cause !== undefined ? `${line}\n${formatCause(err.cause)}` : line;
  }
  const message = errorMessage(err);
  if (!verbose) return `devop: internal error: ${oneLine(message)} — run with -v for the stack`;
  const stack = err instanceof Error && err.stack ? err.stack : message;
  const cause = err instanceof Error && err.cause !== undefined ? `\n${formatCause(err.cause)}` : '';
  return `devop: internal error: ${stack}${cause}`;
}

/** A message that spans lines (an API error's body, a quoted log) still prints as one line. */
function oneLine(text: string): string {
  return text.trim().replace(/\s*\n\s*/g, ' ');
}

function formatCause(cause: unknown, depth = 0): string {
  if (depth > 5) return '  caused by: …';
  if (cause instanceof Error) {
    const more = cause.cause !== undefined ? `\n${formatCause(cause.cause, depth + 1)}` : '';
    return `  caused by: ${cause.stack ?? cause.message}${more}`;
  }
  return `  caused by: ${String(cause)}`;
}
