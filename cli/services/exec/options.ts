// What `devop exec` runs with: the session's options and the exec's own (command, ports, env, record, replace).
import type { HttpFilter, StealMode } from '../../../shared/protocol.js';
import type { ChildEnvHook, SessionOptions } from '../../session/connect.js';
import type { ShadowSettings } from '../../shadow/kubeconfig.js';

export interface ExecServiceOptions extends SessionOptions {
  command: string;
  args: string[];
  mode: StealMode;
  /** REMOTE[:LOCAL] specs; empty = the container's declared ports. */
  ports: (string | number)[];
  httpFilter?: HttpFilter;
  /** `--tls-secret [PORT=]NAME` values: the Secrets of the filtered ports the workload serves TLS on. */
  tlsSecrets?: string[];
  flush: boolean;
  stealProbes: boolean;
  /** allow: exact names of code-loading pod vars to give the command anyway (cli/services/child-env.ts). */
  env: { include: string[]; exclude: string[]; allow?: string[]; override: Record<string, string>; file?: string };
  /** --shadow: the command's kubeconfig points at the shadow API proxy (cli/shadow/kubeconfig.ts; commands/exec.ts adds
   * its hook). */
  shadow?: ShadowSettings;
  /** Hooks that add to the child env once the session is up (e.g. the outgoing proxy); each may return a cleanup. */
  childEnvHooks?: ChildEnvHook[];
  cwd?: string;
  /** `--record FILE`: every stolen HTTP exchange is written there as HAR 1.2. */
  record?: string;
  /** `--record-secrets`: the HAR keeps credentials (redacted otherwise). */
  recordSecrets?: boolean;
  /** Run in place of the target workload (cli/replace/stage.ts). */
  replace?: boolean;
}
