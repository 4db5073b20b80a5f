// The devop.json schema, defined once with zod: every key with its default and a doc sentence; loading and validation
// with errors that name the key path, the bad value and what is accepted. devop.schema.json is generated from it.
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { UserError } from './errors.js';
import { TARGET_FORMS, parseTarget } from './target.js';

export { CONFIG_FILE_NAME } from './config-file-name.js';

const PORT_MAPPING = /^(\d{1,5})(?::(\d{1,5}))?$/;
const PORT_MAPPING_EXPECTED = 'expected a port mapping REMOTE[:LOCAL] with ports 1-65535, e.g. 3000 or "80:8080"';

/** `REMOTE[:LOCAL]` (or a bare port number) → the pod port and the local port it maps to; null when malformed. */
export function parsePortMapping(spec: string | number): { remote: number; local: number } | null {
  const m = PORT_MAPPING.exec(String(spec).trim());
  if (!m) return null;
  const remote = Number(m[1]);
  const local = m[2] === undefined ? remote : Number(m[2]);
  const ok = (p: number): boolean => Number.isInteger(p) && p >= 1 && p <= 65535;
  return ok(remote) && ok(local) ? { remote, local } : null;
}

function isRegex(source: string): boolean {
  try {
    new RegExp(source);
    return true;
  } catch {
    return false;
  }
}

const PORT_MAPPING_DOC = 'A pod port, optionally mapped to another local port: 3000 or "80:8080" (REMOTE:LOCAL).';
const PortMapping = z
  .union([z.number(), z.string()], { error: PORT_MAPPING_EXPECTED })
  .refine((v) => parsePortMapping(v) !== null, { message: PORT_MAPPING_EXPECTED })
  .describe(PORT_MAPPING_DOC);

const Regex = (what: string) => z.string().refine(isRegex, { message: `expected a valid regular expression for ${what}` });

const HttpFilterConfig = z
  .strictObject({
    header: z
      .string()
      .refine((v) => /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+:\s*/.test(v) && isRegex(v.slice(v.indexOf(':') + 1).trim()), {
        message: 'expected "Header-Name: value-regex", e.g. "x-devop-user: alice"',
      })
      .optional()
      .describe('Steal only requests with a header matching "Name: value-regex" (name case-insensitive), e.g. "x-devop-user: alice".'),
    path: Regex('the path').optional().describe('Steal only requests whose path (with query) matches this regex, e.g. "^/api/v1/llamas".'),
    method: z.string().regex(/^[A-Za-z]+$/, 'expected an HTTP method such as GET').optional().describe('Steal only requests with this HTTP method (case-insensitive).'),
    match: z.enum(['all', 'any']).default('all').describe('"all": every given criterion must match; "any": one is enough.'),
  })
  .describe('HTTP filter: only matching requests go to the local process, all others still reach the pod (steal mode).');

const Toleration = z
  .strictObject({
    key: z.string().optional(),
    operator: z.enum(['Exists', 'Equal']).optional(),
    value: z.string().optional(),
    effect: z.enum(['NoSchedule', 'PreferNoSchedule', 'NoExecute']).optional(),
    tolerationSeconds: z.number().int().optional(),
  })
  .describe('A Kubernetes toleration for the agent pod.');

const StringMap = z.record(z.string(), z.string());

export const DevopConfig = z
  .strictObject({
    $schema: z.string().optional().describe('Path or URL of devop.schema.json (for editors; ignored by devop).'),
    target: z
      .string()
      .refine((v) => safeTarget(v), { message: `expected a target: ${TARGET_FORMS}` })
      .optional()
      .describe('What to run as: pod/NAME, deploy/NAME, statefulset/NAME, rollout/NAME (each optionally /container/NAME) or targetless. No default: -t/--target when absent.'),
    namespace: z.string().optional().describe("The target's namespace. Default: the kubeconfig context's namespace, else \"default\"."),
    context: z.string().optional().describe('The kubeconfig context to use. Default: the current context.'),
    kubeconfig: z.string().optional().describe('Path of the kubeconfig file. Default: $KUBECONFIG, else ~/.kube/config.'),
    requestTimeout: z
      .string()
      .regex(/^(\d+|(\d+(\.\d+)?(ms|s|m|h))+)$/, 'expected seconds or a duration such as "10s", "1m", "1m30s", or "0"')
      .optional()
      .describe('How long devop waits for the API server to answer one request (kubectl --request-timeout syntax: "10s", "1m", a number of seconds; "0": no limit). Default: "30s".'),
    incoming: z
      .strictObject({
        mode: z.enum(['steal', 'mirror']).default('mirror').describe('"steal": the local process answers instead of the pod; "mirror": the pod answers, the local process gets a copy.'),
        ports: z.array(PortMapping).default([]).describe('Pod ports to steal/mirror as REMOTE[:LOCAL]. Default []: every port the target container declares, each to the same local port.'),
        httpFilter: HttpFilterConfig.optional(),
        flush: z.boolean().default(true).describe('Close the pod\'s existing connections when stealing starts, so keep-alive clients reconnect and reach the local process at once.'),
        stealProbes: z.boolean().default(false).describe("Also steal connections from the node (kubelet probes). Off: probes keep reaching the pod, so it is not restarted."),
      })
      .prefault({})
      .describe('Traffic that reaches the pod.'),
    env: z
      .strictObject({
        include: z.array(z.string()).default(['*']).describe('Names (with * wildcards) of pod env vars the local process gets. KUBERNETES_SERVICE_* and KUBERNETES_PORT* only when named here explicitly.'),
        exclude: z.array(z.string()).default([]).describe('Names (with * wildcards) of pod env vars to leave out (applied after include).'),
        override: StringMap.default({}).describe('Variables set for the local process, over the pod\'s.'),
        file: z.string().optional().describe('A dotenv file whose variables are applied over the pod\'s (before override).'),
      })
      .prefault({})
      .describe("The pod's environment for the local process."),
    agent: z
      .strictObject({
        image: z.string().optional().describe('The agent image. Default: the image of this devop version.'),
        namespace: z.string().optional().describe("Where the agent Job runs. Default: the target's namespace."),
        ttlSeconds: z.number().int().min(0).max(86400).default(30).describe('How long the agent stays after its last session ends (seconds).'),
        ephemeral: z.boolean().default(false).describe('Run the agent as an ephemeral container in the target pod instead of a Job on its node.'),
        startupTimeoutSeconds: z.number().int().min(1).max(3600).default(60).describe('How long to wait for the agent to become ready (seconds).'),
        labels: StringMap.default({}).describe('Extra labels on the agent pod.'),
        annotations: StringMap.default({}).describe('Extra annotations on the agent pod.'),
        tolerations: z.array(Toleration).default([]).describe('Tolerations for the agent pod (e.g. for tainted nodes).'),
      })
      .prefault({})
      .describe('The in-cluster agent.'),
    outgoing: z
      .strictObject({
        enabled: z.boolean().default(true).describe('Send the local process\'s outgoing connections through the pod.'),
        proxy: z.boolean().default(true).describe('Set HTTP(S)_PROXY / ALL_PROXY / NO_PROXY for the local process (a local SOCKS5 + HTTP CONNECT proxy).'),
        nodePreload: z.boolean().default(true).describe('For Node local processes: route net.connect and dns.lookup through the pod transparently (NODE_OPTIONS=--import).'),
        include: z.array(z.string()).default([]).describe('Only these destinations go through the pod (host, *.domain, CIDR, optionally :port). Default []: all but exclude.'),
        exclude: z.array(z.string()).default([]).describe('Destinations that stay local (same forms as include); loopback always stays local.'),
      })
      .prefault({})
      .describe("The local process's outgoing connections."),
    dns: z
      .strictObject({
        enabled: z.boolean().default(true).describe("Resolve the local process's DNS names through the pod (cluster DNS)."),
      })
      .prefault({})
      .describe('Name resolution for the local process.'),
    remoteFiles: z.array(z.string().min(1)).default([]).describe('Absolute paths in the target container to read through the agent (e.g. /var/run/secrets/kubernetes.io/serviceaccount/token).'),
    allPods: z.boolean().default(false).describe('Steal/mirror on every pod of the target, not just one.'),
  })
  .describe('devop configuration (devop.json).');

export type DevopConfig = z.infer<typeof DevopConfig>;
/** What a user may write (every key optional). */
export type DevopConfigInput = z.input<typeof DevopConfig>;

/**
 * The JSON Schema of devop.json (what scripts/gen-schema.ts writes to devop.schema.json): input shapes (defaults make keys
 * optional), with the port-mapping syntax spelled out for editors (zod checks it in a refinement, which JSON Schema
 * cannot carry).
 */
export function configJsonSchema(): Record<string, unknown> {
  const schema = z.toJSONSchema(DevopConfig, {
    io: 'input',
    target: 'draft-2020-12',
    override: (ctx) => {
      if (ctx.zodSchema !== PortMapping) return;
      for (const key of Object.keys(ctx.jsonSchema)) delete (ctx.jsonSchema as Record<string, unknown>)[key];
      Object.assign(ctx.jsonSchema, {
        description: PORT_MAPPING_DOC,
        anyOf: [
          { type: 'integer', minimum: 1, maximum: 65535 },
          { type: 'string', pattern: PORT_MAPPING.source },
        ],
      });
    },
  }) as Record<string, unknown>;
  return { ...schema, title: 'devop.json' };
}

function safeTarget(v: string): boolean {
  try {
    parseTarget(v);
    return true;
  } catch {
    return false;
  }
}

/** Validates a parsed config object; `source` (a file path or "--flags") prefixes errors. Returns it with defaults filled. */
export function parseConfig(obj: unknown, source: string): DevopConfig {
  const parsed = DevopConfig.safeParse(obj);
  if (parsed.success) return parsed.data;
  throw configError(parsed.error.issues, obj, source);
}

/** Reads and validates a devop.json file. */
export function loadConfigFile(path: string): DevopConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new UserError(`config file ${path} does not exist`, 'create it (devop config init) or pass the right path with --config');
    throw new UserError(`cannot read config file ${path}: ${(err as Error).message}`, 'check the path and its permissions');
  }
  let obj: unknown;
  try {
    obj = JSON.parse(text);
  } catch (err) {
    throw new UserError(`config file ${path} is not valid JSON: ${(err as Error).message}`, 'fix the JSON syntax (editors validate it against devop.schema.json)');
  }
  return parseConfig(obj, path);
}

/**
 * Environment variables that override a config key (precedence: devop.json < environment < command-line flags). Each
 * maps to a key path; booleans accept true/false/1/0.
 */
export const ENV_OVERRIDES: Readonly<Record<string, { key: string; type: 'string' | 'boolean' }>> = {
  DEVOP_TARGET: { key: 'target', type: 'string' },
  DEVOP_NAMESPACE: { key: 'namespace', type: 'string' },
  DEVOP_CONTEXT: { key: 'context', type: 'string' },
  DEVOP_KUBECONFIG: { key: 'kubeconfig', type: 'string' },
  DEVOP_REQUEST_TIMEOUT: { key: 'requestTimeout', type: 'string' },
  DEVOP_MODE: { key: 'incoming.mode', type: 'string' },
  DEVOP_AGENT_IMAGE: { key: 'agent.image', type: 'string' },
  DEVOP_AGENT_NAMESPACE: { key: 'agent.namespace', type: 'string' },
  DEVOP_AGENT_EPHEMERAL: { key: 'agent.ephemeral', type: 'boolean' },
  DEVOP_OUTGOING: { key: 'outgoing.enabled', type: 'boolean' },
  DEVOP_DNS: { key: 'dns.enabled', type: 'boolean' },
};

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
      else throw new UserError(`environment variable ${name} is "${raw}"`, `set it to true or false (it overrides ${key})`);
    }
    const path = key.split('.');
    let node = out;
    for (const segment of path.slice(0, -1)) node = (node[segment] ??= {}) as Record<string, unknown>;
    node[path[path.length - 1]] = value;
  }
  return out as DevopConfigInput;
}

/** Merges config layers, later ones winning; objects merge key by key, lists and scalars are replaced. */
export function mergeConfigInput(...layers: unknown[]): unknown {
  const isPlain = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
  let result: unknown = {};
  for (const layer of layers) {
    if (layer === undefined) continue;
    if (!isPlain(result) || !isPlain(layer)) {
      result = layer;
      continue;
    }
    const merged: Record<string, unknown> = { ...result };
    for (const [k, v] of Object.entries(layer)) {
      if (v === undefined) continue;
      merged[k] = isPlain(merged[k]) && isPlain(v) ? mergeConfigInput(merged[k], v) : v;
    }
    result = merged;
  }
  return result;
}

type Issue = z.core.$ZodIssue;

/** One problem of a config: the key path as written in JavaScript (`incoming.ports[1]`), what it is, what is accepted. */
export interface ConfigProblem {
  key: string;
  /** "is 70000", "is missing", or "is not a devop.json key". */
  found: string;
  accepted: string;
}

/** Every problem of a config object (empty when it is valid). */
export function configProblems(obj: unknown): ConfigProblem[] {
  const parsed = DevopConfig.safeParse(obj);
  return parsed.success ? [] : parsed.error.issues.flatMap((issue) => describeIssue(issue, obj));
}

/** `<source>: <key> <found> — accepted: <what>`: one line per problem, as `devop config validate` prints them. */
export function formatConfigProblem(problem: ConfigProblem, source: string): string {
  return `${source}: ${problem.key} ${problem.found} — accepted: ${problem.accepted}`;
}

function configError(issues: readonly Issue[], obj: unknown, source: string): UserError {
  const problems = issues.flatMap((issue) => describeIssue(issue, obj));
  const first = problems[0];
  const more = problems.length > 1 ? ` (and ${problems.length - 1} more problem${problems.length > 2 ? 's' : ''})` : '';
  const unknown = issues[0].code === 'unrecognized_keys' ? issues[0] : undefined;
  if (unknown) {
    const where = keyPath(unknown.path);
    const keys = unknown.keys.map((key) => keyPath([...unknown.path, key])).join(', ');
    return new UserError(`${source}: unknown key ${keys}${more}`, `accepted keys${where ? ` in ${where}` : ''}: ${acceptedKeys(unknown.path.map(String)).join(', ')}`);
  }
  return new UserError(`${source}: ${first.key} ${first.found}${more}`, `accepted: ${first.accepted}`);
}

function keyPath(path: ReadonlyArray<PropertyKey>): string {
  return path.map((segment, i) => (typeof segment === 'number' ? `[${segment}]` : i === 0 ? String(segment) : `.${String(segment)}`)).join('');
}

function describeIssue(issue: Issue, root: unknown): ConfigProblem[] {
  const path = issue.path.map(String);
  if (issue.code === 'unrecognized_keys') {
    const where = keyPath(issue.path);
    const keys = acceptedKeys(path).join(', ');
    return issue.keys.map((key) => ({ key: keyPath([...issue.path, key]), found: 'is not a devop.json key', accepted: where ? `in ${where}: ${keys}` : keys }));
  }
  const value = valueAt(root, path);
  const shown = value === undefined ? 'missing' : truncate(JSON.stringify(value));
  return [{ key: path.length ? keyPath(issue.path) : '(top level)', found: `is ${shown}`, accepted: accepted(issue) }];
}

function accepted(issue: Issue): string {
  switch (issue.code) {
    case 'invalid_type':
      return issue.expected === 'array' ? 'a list (JSON array)' : issue.expected === 'object' ? 'an object' : `a ${issue.expected}`;
    case 'invalid_value':
      return issue.values.map((v) => JSON.stringify(v)).join(' | ');
    case 'too_small':
      return issue.origin === 'string' ? `a string of at least ${String(issue.minimum)} characters` : `a number >= ${String(issue.minimum)}`;
    case 'too_big':
      return issue.origin === 'string' ? `a string of at most ${String(issue.maximum)} characters` : `a number <= ${String(issue.maximum)}`;
    default:
      return issue.message.replace(/^(Invalid input: )?expected /, '');
  }
}

function acceptedKeys(path: string[]): string[] {
  let schema: z.ZodType = DevopConfig;
  for (const segment of path) {
    const inner = unwrap(schema);
    if (!(inner instanceof z.ZodObject)) return [];
    schema = inner.shape[segment] as z.ZodType;
  }
  const inner = unwrap(schema);
  return inner instanceof z.ZodObject ? Object.keys(inner.shape) : [];
}

function unwrap(schema: z.ZodType): z.ZodType {
  let current: z.ZodType = schema;
  // optional(default(prefault(object))) at most: a few layers, never a cycle.
  for (let i = 0; i < 5; i += 1) {
    if (current instanceof z.ZodOptional || current instanceof z.ZodDefault || current instanceof z.ZodPrefault) current = current.unwrap() as z.ZodType;
    else break;
  }
  return current;
}

function valueAt(root: unknown, path: string[]): unknown {
  let value: unknown = root;
  for (const segment of path) {
    if (value === null || typeof value !== 'object') return undefined;
    value = (value as Record<string, unknown>)[segment];
  }
  return value;
}

function truncate(text: string | undefined): string {
  if (text === undefined) return 'undefined';
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}
