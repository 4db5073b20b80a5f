// The local command's environment: the pod's env (read by the agent), the env file, the user's include/exclude and
// overrides, then each hook's additions (the outgoing proxy, the shadow kubeconfig), as the `env` step.
import { UserError } from '../../../shared/errors.js';
import { FEATURES } from '../../../shared/protocol.js';
import { type Reporter, step, warn } from '../../reporter.js';
import type { Session, StartedEnvHook } from '../../session/connect.js';
import { agentRequest } from '../../session/tunnel.js';
import { buildChildEnv, readEnvFile, withheldLine } from '../child-env.js';
import type { ExecServiceOptions } from './options.js';

export async function readRemoteEnv(session: Session): Promise<Record<string, string>> {
  if (!session.hello.features.includes(FEATURES.env)) return {};
  const answer = await agentRequest(
    session.tunnel,
    (id) => session.tunnel.send({ type: 'envRead', id }),
    ['env'],
    'read the pod env',
  );
  if (answer.type === 'error')
    throw new UserError(
      `the agent could not read the pod's env: ${answer.message}`,
      answer.hint ?? 'check the agent logs',
    );
  return answer.vars;
}

/**
 * The `env` step; each hook's cleanup goes to `onCleanup`, to run when the session ends, and a launcher the command
 * must be started under (`--outgoing-netns`) to `onLauncher`. The hooks start while the pod's env is read (the outgoing
 * proxy's start would otherwise wait for that round trip), then add to the env in their order.
 */
export async function prepareChildEnv(
  session: Session,
  options: Pick<ExecServiceOptions, 'env' | 'childEnvHooks'>,
  reporter: Reporter,
  onCleanup: (cleanup: () => Promise<void>) => void,
  onLauncher?: (launcher: (localPorts: readonly number[]) => string[]) => void,
): Promise<Record<string, string>> {
  const prepared = await step(
    reporter,
    'env',
    'environment',
    async () => {
      const starting = Promise.allSettled((options.childEnvHooks ?? []).map((hook) => hook({ session, reporter })));
      const read = Promise.all([
        readRemoteEnv(session),
        options.env.file ? readEnvFile(options.env.file) : Promise.resolve(undefined),
      ]);
      // Whatever failed, every hook that started is cleaned up when the session ends.
      const [started, values] = await Promise.all([starting, read.then(ok, failed)]);
      const hooks = started.map((s) => (s.status === 'fulfilled' ? s.value : undefined));
      for (const hook of hooks) if (hook?.cleanup) onCleanup(hook.cleanup);
      const hookFailure = started.find((s) => s.status === 'rejected');
      if (hookFailure) throw hookFailure.reason;
      if (!values.ok) throw values.error;
      const [remoteEnv, envFile] = values.value;
      let env = buildChildEnv({
        localEnv: process.env,
        remoteEnv,
        include: options.env.include,
        exclude: options.env.exclude,
        allow: options.env.allow,
        override: options.env.override,
        envFile,
        onWithheld: (names) => warn(reporter, withheldLine(names)),
      });
      for (const hook of hooks as StartedEnvHook[]) {
        env = await hook.apply(env);
        if (hook.launcher) onLauncher?.(hook.launcher);
      }
      return { env, remoteCount: Object.keys(remoteEnv).length };
    },
    (v) => `${v.remoteCount} variables from the pod`,
  );
  return prepared.env;
}

const ok = <T>(value: T): { ok: true; value: T } => ({ ok: true, value });
const failed = (error: unknown): { ok: false; error: unknown } => ({ ok: false, error });
