// The TypeScript type of a parsed devop.json, read off the options table at compile time (so that adding a key to the
// table is the whole change); schema.ts checks values against the same table at run time.
import type { CONFIG_SECTIONS, OPTIONS, OptionName } from './options.js';

/** A Kubernetes toleration for the agent pod. */
export interface Toleration {
  key?: string;
  operator?: 'Exists' | 'Equal';
  value?: string;
  effect?: 'NoSchedule' | 'PreferNoSchedule' | 'NoExecute';
  tolerationSeconds?: number;
}

type Spec = (typeof OPTIONS)[OptionName];
type KeyedSpec = Extract<Spec, { key: string }>;
/** key path (`agent.ttlSeconds`) → its table entry. */
type ByKey = { [S in KeyedSpec as S['key']]: S };

type ValueOf<S> = S extends { type: 'boolean' }
  ? boolean
  : S extends { type: 'integer' | 'number' }
    ? number
    : S extends { type: 'enum'; values: readonly (infer V)[] }
      ? V
      : S extends { type: 'strings' | 'paths' | 'tlsSecrets' }
        ? string[]
        : S extends { type: 'map' }
          ? Record<string, string>
          : S extends { type: 'portMappings' }
            ? (string | number)[]
            : S extends { type: 'tolerations' }
              ? Toleration[]
              : string;

type Head<K extends string> = K extends `${infer H}.${string}` ? H : K;
type Under<E, H extends string> = { [K in keyof E & string as K extends `${H}.${infer T}` ? T : never]: E[K] };
type IsLeaf<E, H> = H extends keyof E ? true : false;
type Sections = typeof CONFIG_SECTIONS;
type OptionalSection = { [K in keyof Sections]: Sections[K] extends { optional: true } ? K : never }[keyof Sections];
/** A leaf with a default, or a section that is filled in (sections are, unless marked optional). */
type Filled<E, H, P extends string> = H extends keyof E
  ? E[H] extends { default: unknown }
    ? H
    : never
  : `${P}${H & string}` extends OptionalSection
    ? never
    : H;

/** The keys of E (paths below P) as nested objects; keys without a default are optional. */
type Tree<E, P extends string> = {
  [H in Head<keyof E & string> as Filled<E, H, P> extends never ? never : H]: IsLeaf<E, H> extends true
    ? ValueOf<E[H & keyof E]>
    : Tree<Under<E, H>, `${P}${H}.`>;
} & {
  [H in Head<keyof E & string> as Filled<E, H, P> extends never ? H : never]?: IsLeaf<E, H> extends true
    ? ValueOf<E[H & keyof E]>
    : Tree<Under<E, H>, `${P}${H}.`>;
};

type Flatten<T> = T extends object ? (T extends unknown[] ? T : { [K in keyof T]: Flatten<T[K]> }) : T;
type DeepPartial<T> = T extends unknown[] ? T : T extends object ? { [K in keyof T]?: DeepPartial<T[K]> } : T;

/** A parsed devop.json: defaults filled in. */
export type DevopConfig = Flatten<Tree<ByKey, ''>>;
/** What a user may write (every key optional). */
export type DevopConfigInput = DeepPartial<DevopConfig>;
