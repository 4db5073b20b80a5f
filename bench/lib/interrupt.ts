// A bench stopped with Ctrl-C or SIGTERM tears down what it set up (network namespaces, cgroups, rules, its
// processes) before it exits, as it does when it ends: `teardown` runs once, whichever comes first.
/** How long an interrupted bench's teardown may take before the bench exits anyway. */
const TEARDOWN_DEADLINE_MS = 30_000;

/** Returns `teardown`, run at most once; SIGINT/SIGTERM run it and exit (130/143). */
export function teardownOnInterrupt(teardown: () => Promise<void>): () => Promise<void> {
  let done: Promise<void> | undefined;
  const once = (): Promise<void> => {
    done ??= teardown();
    return done;
  };
  let interruptedBy: NodeJS.Signals | undefined;
  const interrupted = (signal: NodeJS.Signals): void => {
    // A second signal (Ctrl-C reaches the whole process group, and tsx relays it again) must not cut the teardown.
    if (interruptedBy) return;
    interruptedBy = signal;
    console.error(`${signal}: tearing down what the bench set up`);
    const code = signal === 'SIGINT' ? 130 : 143;
    setTimeout(() => process.exit(code), TEARDOWN_DEADLINE_MS).unref();
    once().then(
      () => process.exit(code),
      (err: unknown) => {
        console.error(`teardown failed: ${err instanceof Error ? err.message : String(err)}`);
        process.exit(code);
      },
    );
  };
  process.on('SIGINT', interrupted);
  process.on('SIGTERM', interrupted);
  return once;
}
