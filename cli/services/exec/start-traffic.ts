// The `listen` and `traffic` steps: once the local command listens on every local port, its ports are stolen or
// mirrored; a command that never listens is said (and waited for) rather than given traffic.
import { UserError } from '../../../shared/errors.js';
import type { LocalCommand } from '../../process/child.js';
import { waitForListen } from '../../process/listen.js';
import { info, type Reporter, step } from '../../reporter.js';
import { SESSION_DEFAULTS } from '../../session/connect.js';
import type { PortMapping } from '../ports.js';
import type { ExecServiceOptions } from './options.js';
import { describeFilter } from './session-info.js';
import type { TrafficControl } from './traffic-control.js';

/** Waits for each port's local listener, then subscribes it; says why when the command never listens. */
export async function startTraffic(
  ports: PortMapping[],
  traffic: TrafficControl,
  options: Pick<ExecServiceOptions, 'replace' | 'mode' | 'target' | 'startupTimeoutMs' | 'httpFilter'>,
  reporter: Reporter,
  child: LocalCommand,
): Promise<void> {
  if (ports.length === 0) {
    const why = options.replace
      ? options.mode === 'steal'
        ? 'no ports to steal (the container declares none; pass -p REMOTE[:LOCAL])'
        : "replaced without --steal: the copy gets no Service traffic; env, files and outgoing are the copy's"
      : options.target && options.target !== 'targetless'
        ? 'no ports to steal or mirror (the container declares none; pass -p REMOTE[:LOCAL]): only the env is applied'
        : 'targetless: no incoming traffic; outgoing connections go through the cluster';
    info(reporter, why);
    traffic.markReady();
    return;
  }
  const list = ports.map((p) => `:${p.local}`).join(', ');
  const verb = options.mode === 'steal' ? 'stealing' : 'mirroring';
  await step(reporter, 'listen', `waiting for the local command to listen on ${list}`, async () => {
    const results = await Promise.all(
      ports.map((p) =>
        waitForListen(p.local, {
          timeoutMs: options.startupTimeoutMs ?? SESSION_DEFAULTS.startupTimeoutMs,
          stopped: child.exited,
        }),
      ),
    );
    let missing = ports.filter((_, i) => !results[i]);
    if (missing.length > 0 && child.child.exitCode === null && child.child.signalCode === null) {
      const ms = options.startupTimeoutMs ?? SESSION_DEFAULTS.startupTimeoutMs;
      reporter.emit({
        type: 'error',
        step: 'listen',
        message:
          `the local command does not listen on 127.0.0.1:${missing.map((p) => p.local).join(', 127.0.0.1:')} ` +
          `after ${ms / 1000} s: the pod keeps serving port ${missing.map((p) => p.remote).join(', ')}`,
        hint:
          'make the command listen on that port on 127.0.0.1 (or 0.0.0.0), or map it with -p REMOTE:LOCAL; devop ' +
          'keeps waiting',
      });
      // Keep waiting in the background: a slow build may still bring the listener up.
      const late = await Promise.all(
        missing.map((p) => waitForListen(p.local, { timeoutMs: Number.MAX_SAFE_INTEGER, stopped: child.exited })),
      );
      missing = missing.filter((_, i) => !late[i]);
    }
    if (missing.length > 0) {
      // Only the command's end stops the wait. A step that did not succeed never gets a tick: it fails with the reason
      // (the session then ends with the command's exit code, see runExec).
      const { exitCode, signalCode } = child.child;
      const how = signalCode ? `was ended by ${signalCode}` : `exited with code ${exitCode}`;
      const where = missing.map((p) => `127.0.0.1:${p.local}`).join(', ');
      throw new UserError(`the local command ${how} before listening on ${where}`, 'see its output above');
    }
  });
  if (child.child.exitCode !== null || child.child.signalCode !== null) return;
  await step(
    reporter,
    'traffic',
    `${verb} ${ports.map((p) => `:${p.remote}`).join(', ')}`,
    () => traffic.subscribeAll(),
    () => describeFilter(options.httpFilter),
  );
  traffic.markReady();
}
