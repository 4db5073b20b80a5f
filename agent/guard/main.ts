// The replace guard's entry: what the agent bundle runs for `agent guard` (agent/main.ts loads it only then, so the
// agent itself never loads the guard's node:https and TLS).
import { createLog } from '../log.js';
import { runReplaceGuard } from './replace-guard.js';

/** Runs the guard of a `--replace` session (a Job of its own, no target netns) until it has restored the workload. */
export async function runGuard(): Promise<number> {
  // As PID 1 of its container, a signal without a handler is ignored: its Job's deletion (devop restored the
  // workload itself) would wait for the whole grace period, and the guard could still act meanwhile.
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => process.exit(0));
  await runReplaceGuard(process.env, createLog('info'));
  return 0;
}
