// The devop.json keys a project file may not set on its own: the ones that choose the cluster (context, kubeconfig,
// whose exec plugin is a command), replace a workload, run another agent image, take a node-wide pod, or keep
// credentials in a HAR file. A file that sets one is refused, in one line, unless the same is given as a flag or
// DEVOP_* variable, or the user trusts it.
import { UserError } from '../../shared/errors.js';
import { OPTIONS, type OptionName } from './options.js';
import type { DevopConfig } from './types.js';

/** The variable that trusts every devop.json, like --trust-config. */
export const TRUST_CONFIG_ENV = 'DEVOP_TRUST_CONFIG';

/** The options whose devop.json key a project file may not set alone. */
export const GUARDED_OPTIONS = [
  'context',
  'kubeconfig',
  'replace',
  'agentImage',
  'allowHostNetwork',
  'recordSecrets',
] as const satisfies readonly OptionName[];
type GuardedOption = (typeof GUARDED_OPTIONS)[number];

export interface ConfigTrustInput {
  /** The devop.json read, and its values (defaults filled in). */
  path: string;
  fileConfig: DevopConfig;
  /** The command's flags (undefined: not given). */
  flags?: Partial<Record<string, unknown>>;
  env: NodeJS.ProcessEnv;
  /** --trust-config. */
  trust?: boolean;
}

function valueAt(config: unknown, key: string): unknown {
  let node = config;
  for (const segment of key.split('.')) node = (node as Record<string, unknown> | undefined)?.[segment];
  return node;
}

function trustedByEnv(env: NodeJS.ProcessEnv): boolean {
  return /^(1|true|yes)$/i.test(env[TRUST_CONFIG_ENV] ?? '');
}

/** The guarded keys the file sets (to other than their default) that no flag or DEVOP_* variable gives instead. */
export function untrustedSettings(input: ConfigTrustInput): { name: GuardedOption; key: string; value: unknown }[] {
  if (input.trust || trustedByEnv(input.env)) return [];
  return GUARDED_OPTIONS.flatMap((name) => {
    const spec = OPTIONS[name];
    const value = valueAt(input.fileConfig, spec.key);
    if (value === undefined || value === ('default' in spec ? spec.default : undefined)) return [];
    if (input.flags?.[name] !== undefined) return [];
    if ('env' in spec && input.env[spec.env]) return [];
    return [{ name, key: spec.key, value }];
  });
}

/** `--context prod`, `--replace`: what gives the same on the command line. */
function asFlag(name: GuardedOption, value: unknown): string {
  const long = /--[a-z-]+/.exec(OPTIONS[name].flags)?.[0] ?? name;
  return typeof value === 'boolean' ? long : `${long} ${JSON.stringify(value)}`;
}

/** Refuses a devop.json that sets guarded keys on its own: one line naming them and the ways to allow them. */
export function checkConfigTrust(input: ConfigTrustInput): void {
  const found = untrustedSettings(input);
  if (found.length === 0) return;
  const settings = found.map((s) => `${s.key}=${JSON.stringify(s.value)}`).join(', ');
  throw new UserError(
    `${input.path} sets ${settings}: a project's devop.json may not choose the cluster, replace a workload, run ` +
      'another agent image, take a host-network pod or keep credentials in a HAR on its own',
    `give the same on the command line (${found.map((s) => asFlag(s.name, s.value)).join(' ')}), or pass ` +
      `--trust-config (or set ${TRUST_CONFIG_ENV}=1) to use the file as it is`,
  );
}
