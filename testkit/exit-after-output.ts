// A child's end as a test wants it: its exit code or signal, once its output has been read. 'exit' may come before
// the last lines in its stdout/stderr pipes; 'close' comes after them, unless a process that outlives the child holds
// the pipes open, so the wait for it is bounded.
import type { ChildProcess } from 'node:child_process';

/** How long the output of an exited process may take to arrive. */
const OUTPUT_DRAIN_MS = 2000;

export function exitAfterOutput(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  const closed = new Promise<void>((r) => child.once('close', () => r()));
  return new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    child.once('exit', (code, signal) => r({ code, signal })),
  ).then(async (result) => {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([closed, new Promise((r) => (timer = setTimeout(r, OUTPUT_DRAIN_MS)))]);
    clearTimeout(timer);
    return result;
  });
}
