// The DEVOP_* environment variables that override a devop.json key (precedence: devop.json < environment < flags), read
// off the options table. Booleans accept true/false/1/0/yes/no.
import { UserError } from '../../shared/errors.js';
import { OPTIONS, type OptionSpec } from './options.js';
import type { DevopConfigInput } from './types.js';

/** Variable name → the key it sets and how its text is read. */
export const ENV_OVERRIDES: Readonly<Record<string, { key: string; type: 'string' | 'boolean' }>> = Object.fromEntries(
  (Object.values(OPTIONS) as OptionSpec[]).flatMap((spec) =>
    spec.env !== undefined && spec.key !== undefined
      ? [[spec.env, { key: spec.key, type: spec.type === 'boolean' ? 'boolean' : 'string' }] as const]
      : [],
  ),
);

/** The config layer that ENV_OVERRIDES variables set in `env` (a partial input for mergeConfigInput). */
export function envOverrides(env: NodeJS.ProcessEnv): DevopConfigInput {
  const out: Record<string, unknown> = {};
  for (const [name, { key, type }] of Object.entries(ENV_OVERRIDES)) {
    const raw = env[name];
    if (raw === undefined || raw === '') continue;
    let value: unknown = raw;
    if (type === 'boolean') {
      if (/^(true|1|yes)$/i.test(raw)) value = true;
      else if (/^(false|0|no)$/i.test(raw)) value = false;
      else {
        const hint = `set it to true or false (it overrides ${key})`;
        throw new UserError(`environment variable ${name} is "${raw}"`, hint);
      }
    }
    const path = key.split('.');
    let node = out;
    for (const segment of path.slice(0, -1)) {
      node[segment] ??= {};
      node = node[segment] as Record<string, unknown>;
    }
    node[path[path.length - 1]] = value;
  }
  return out as DevopConfigInput;
}
