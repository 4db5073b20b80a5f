// The command line as the last layer of the config merge (devop.json < DEVOP_* variables < flags): each given flag is
// put at its table entry's devop.json key, and the whole is checked by the devop.json schema, so a flag gets the same
// bounds and the same one-line error as its key. Commands read their options off the result, never off both.
import { parseTarget } from '../../shared/target.js';
import { parseDuration, parseRequestTimeout } from './duration.js';
import { configSection, OPTIONS, type OptionName, type OptionSpec } from './options.js';
import { configProblems, mergeConfigInput, parseConfig } from './schema.js';
import type { DevopConfig } from './types.js';

/** Flag values by table entry name, as commander hands them over (undefined: not given). */
export type GivenFlags = Partial<Record<OptionName, unknown>>;

type Tree = Record<string, unknown>;

function valueAt(tree: unknown, key: string): unknown {
  let node = tree;
  for (const segment of key.split('.')) node = (node as Tree | undefined)?.[segment];
  return node;
}

function setAt(tree: Tree, key: string, value: unknown): void {
  const path = key.split('.');
  let node = tree;
  for (const segment of path.slice(0, -1)) {
    node[segment] ??= {};
    node = node[segment] as Tree;
  }
  node[path[path.length - 1]] = value;
}

function longFlag(spec: OptionSpec): string {
  return /--[\w-]+/.exec(spec.flags ?? '')?.[0] ?? '';
}

/** A flag's value as its key holds it; undefined when the flag says nothing (not given, an empty list, --no-steal). */
function keyValue(name: OptionName, spec: OptionSpec, value: unknown, base: DevopConfig): unknown {
  if (value === undefined) return undefined;
  if (spec.sets !== undefined) return value === true ? name : undefined;
  if (Array.isArray(value)) {
    if (value.length === 0) return undefined;
    if (!spec.flagAdds) return value;
    return [...new Set([...((valueAt(base, spec.key ?? '') as unknown[] | undefined) ?? []), ...value])];
  }
  // Read first as the flag itself reads it, so that its error keeps the flag's own wording.
  if (spec.type === 'target') parseTarget(String(value));
  if (spec.type === 'kubeDuration') parseRequestTimeout(String(value), longFlag(spec));
  if (spec.flagDuration) {
    const seconds = parseDuration(String(value), longFlag(spec)) / 1000;
    return spec.type === 'integer' ? Math.round(seconds) : seconds;
  }
  return value;
}

/**
 * `config` (devop.json and the environment, already checked) with the given flags over it, checked again. A value the
 * schema refuses is one line naming the flag: `--agent-ttl: agent.ttlSeconds is 90000` with what is accepted.
 */
export function withFlags(config: DevopConfig, flags: GivenFlags): DevopConfig {
  const layer: Tree = {};
  const given = new Map<string, OptionName>();
  for (const [name, value] of Object.entries(flags) as [OptionName, unknown][]) {
    const spec: OptionSpec | undefined = OPTIONS[name];
    const key = spec?.key ?? spec?.sets;
    if (spec === undefined || key === undefined) continue;
    const keyed = keyValue(name, spec, value, config);
    if (keyed === undefined) continue;
    setAt(layer, key, keyed);
    given.set(key, name);
  }
  if (given.size === 0) return config;
  const merged = mergeConfigInput(withoutReplacedCriteria(config, given), layer);
  const problem = configProblems(merged)[0];
  if (problem === undefined) return parseConfig(merged, 'the command line');
  const key = [...given.keys()].find((k) => problem.key === k || problem.key.startsWith(`${k}[`));
  return parseConfig(merged, key === undefined ? 'the command line' : longFlag(OPTIONS[given.get(key) as OptionName]));
}

/** The config without the file's values of a flagsReplace section's flagged keys, when a flag sets one of them. */
function withoutReplacedCriteria(config: DevopConfig, given: ReadonlyMap<string, OptionName>): unknown {
  const base = structuredClone(config) as Tree;
  for (const [key, name] of given) {
    const section = key.slice(0, key.lastIndexOf('.'));
    if (!section || !configSection(section)?.flagsReplace || (OPTIONS[name] as OptionSpec).besideCriteria) continue;
    const node = valueAt(base, section) as Tree | undefined;
    if (node === undefined) continue;
    for (const spec of Object.values(OPTIONS) as OptionSpec[])
      if (spec.flags !== undefined && !spec.besideCriteria && spec.key?.startsWith(`${section}.`))
        delete node[spec.key.slice(section.length + 1)];
  }
  return base;
}
