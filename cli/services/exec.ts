// `devop exec`: connect a session, start the local command with the pod's env, and — once it listens — steal or mirror
// the pod's ports to it; stop cleanly on Ctrl-C, the command's exit or an error. Returns the command's exit code.
// Each stage is a function of its own in exec/; this file is their order and what is undone at the end.
import { UserError } from '../../shared/errors.js';
import { startLocalCommand, type LocalCommand } from '../process/child.js';
import type { Reporter } from '../reporter.js';
import { startReplaceStep, type ReplaceStep } from '../replace/stage.js';
import type { Session } from '../session/connect.js';
import { takesStealLock } from '../session/steal-gate.js';
import { connectSupervisedSession } from '../session/supervisor.js';
import { routeAgentEvents } from './exec/agent-events.js';
import { prepareChildEnv } from './exec/environment.js';
import { extensionStealsNode } from './exec/extension.js';
import { refuseTakenPorts } from './exec/local-ports.js';
import type { ExecServiceOptions } from './exec/options.js';
import { firstEnd, settle } from './exec/outcome.js';
import { startRecording } from './exec/recording.js';
import { sessionInfo, warnIfAgentLacksFallback } from './exec/session-info.js';
import { startTraffic } from './exec/start-traffic.js';
import { watchStartupSignals } from './exec/startup-signals.js';
import { readTlsSecrets } from './exec/tls-secrets.js';
import { TrafficControl } from './exec/traffic-control.js';
import { resolvePorts } from './ports.js';

export type { ExecServiceOptions } from './exec/options.js';
export { describeFilter } from './exec/session-info.js';

export async function runExec(options: ExecServiceOptions, reporter: Reporter): Promise<number> {
  const startup = watchStartupSignals();
  let session: Session | undefined;
  let child: LocalCommand | undefined;
  let replacement: ReplaceStep | undefined;
  const cleanups: (() => Promise<void>)[] = [];
  /** The session ended as it should: the command exited (whatever its code), not a failure of devop's. */
  let ended = false;
  try {
    // First: a --record path that cannot be written is one line before any cluster call (no Job, no env read).
    const recording = options.record
      ? await startRecording(options.record, options.mode, reporter, options.recordSecrets)
      : undefined;
    if (recording) cleanups.push(() => recording.stop(!ended));

    // --replace: the session targets a copy of the workload's pod (the workload itself is scaled to 0). Not raced with
    // the signals: one during it is seen right after, and the finally below restores what it did.
    let sessionOptions: ExecServiceOptions = options;
    if (options.replace) {
      replacement = await startReplaceStep(options, reporter);
      sessionOptions = { ...options, ...replacement.session };
      startup.signal.throwIfAborted();
    }
    session = await startup.race(connectSupervisedSession({ ...sessionOptions, signal: startup.signal }, reporter));
    const s = session;

    if (!s.target && options.ports.length > 0)
      throw new UserError(
        '-p/--port needs a target: a targetless session receives no traffic',
        'pass -t pod/NAME or deploy/NAME, or drop -p',
      );
    // Replaced without --steal, the copy has none of the workload's labels: no Service sends it traffic.
    const ports =
      options.replace && options.mode !== 'steal'
        ? []
        : resolvePorts(options.ports, s.target?.container, s.target?.ports);
    // An unfiltered steal's cluster-wide locks are taken while the env is read and the command starts.
    if (takesStealLock(options.mode, options.httpFilter)) s.lockAhead?.(ports.map((p) => p.remote));
    const stealProbes = options.stealProbes || (await extensionStealsNode(s, options, reporter));
    // --tls-secret: read now with the user's credentials, so a Secret they cannot read stops devop before the command.
    const tls =
      options.tlsSecrets && s.target
        ? await readTlsSecrets(
            s.kc,
            s.target.namespace,
            options.tlsSecrets,
            ports.map((p) => p.remote),
          )
        : undefined;

    let launcher: (localPorts: readonly number[]) => string[] = () => [];
    const env = await prepareChildEnv(
      s,
      options,
      reporter,
      (cleanup) => cleanups.push(cleanup),
      (wrapper) => {
        launcher = wrapper;
      },
    );
    startup.signal.throwIfAborted();
    routeAgentEvents(s, ports, reporter, recording?.recorder);
    await refuseTakenPorts(ports);

    // Under a launcher (`--outgoing-netns`: dist/devop-netns), which execs the command in its place; the local ports
    // are published from its namespace to this machine's loopback, where the stolen and mirrored traffic is sent.
    const [command, ...args] = [...launcher(ports.map((p) => p.local)), options.command, ...options.args];
    child = await startLocalCommand({
      command,
      args,
      env,
      cwd: options.cwd,
      pipeOutput: reporter.capturesChildOutput,
      onOutput: (stream, text) => reporter.emit({ type: 'output', stream, text }),
    });
    startup.release();

    const info = sessionInfo(s, options, ports, stealProbes);
    warnIfAgentLacksFallback(s, info, reporter);
    const traffic = new TrafficControl(s, info, { ...options, stealProbes, tls }, reporter);
    s.onRetarget?.((change) => traffic.retarget(change));
    const started = startTraffic(ports, traffic, options, reporter, child);
    const code = await settle(await firstEnd(s, child, started), child, started, traffic, reporter);
    ended = true;
    return code;
  } finally {
    startup.release();
    if (child) await child.stop('SIGTERM').catch(() => undefined);
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
    await session?.close('devop exec ended').catch(() => undefined);
    if (replacement) await replacement.restoreStep();
  }
}
