// Every option of devop, once: its flag and help line, its devop.json key and doc sentence, its DEVOP_* variable, its
// type and default, and its `exec --help` group. The commands' flags (commander.ts), the zod schema (schema.ts), the
// env overrides (env.ts), devop.schema.json and docs/config.md are generated from this table. It imports nothing at
// run time, so that `devop --help` reads it without loading zod.
import type { StealMode } from '../../shared/protocol.js';

/** How a devop.json value is checked (schema.ts) and named in docs/config.md. */
export type ValueType =
  | 'string'
  | 'boolean'
  | 'integer'
  | 'number'
  | 'enum'
  | 'strings'
  | 'paths'
  | 'map'
  | 'target'
  | 'kubeDuration'
  | 'portMappings'
  | 'headerFilter'
  | 'bodyFilter'
  | 'tlsSecrets'
  | 'regex'
  | 'httpMethod'
  | 'tolerations';

/** The `devop exec --help` groups, in the order help lists them. */
export const EXEC_HELP_GROUPS = {
  target: 'Target and mode:',
  http: 'HTTP filters (steal only matching requests):',
  incoming: 'Incoming connections:',
  env: 'Environment:',
  outgoing: 'Outgoing traffic and files:',
  cluster: 'Cluster and agent:',
  output: 'Config and output:',
} as const;
export type ExecHelpGroup = keyof typeof EXEC_HELP_GROUPS;

export interface OptionSpec {
  /** commander's flags, e.g. `-t, --target <target>`; none: a devop.json key only. */
  readonly flags?: string;
  /** The flag's line in --help. */
  readonly help?: string;
  /** The flag may be given several times (its value is a list). */
  readonly repeatable?: boolean;
  /** The only values the flag accepts. */
  readonly choices?: readonly string[];
  /** The devop.json key path (`agent.ttlSeconds`); none: a flag only. */
  readonly key?: string;
  /** For a flag without a key of its own: the key it sets to the entry's name (--steal sets incoming.mode "steal"). */
  readonly sets?: string;
  /**
   * A key of a flagsReplace section that is no criterion of it (--tls-secret beside the HTTP filter's): its flag
   * replaces none of the file's criteria, and no criterion's flag replaces it.
   */
  readonly besideCriteria?: boolean;
  /** The flag takes a duration (cli/config/duration.ts: 90, 90s, 1500ms, 2m); the key holds it in seconds. */
  readonly flagDuration?: boolean;
  /** A repeatable flag whose values join the key's list from devop.json (each once) instead of replacing it. */
  readonly flagAdds?: boolean;
  /** The environment variable that overrides the key (devop.json < environment < flags). */
  readonly env?: string;
  readonly type: ValueType;
  /** The allowed values of an `enum`. */
  readonly values?: readonly string[];
  readonly min?: number;
  readonly max?: number;
  /** The key's default; for a flag without a key, the flag's default. */
  readonly default?: unknown;
  /**
   * The value used when nothing sets a key that a parsed devop.json leaves unset (no default in the schema): the
   * commands that read no devop.json (devop ls) then use the same one.
   */
  readonly unsetDefault?: string;
  /** What docs/config.md shows as the default when it is decided at run time (none in the schema). */
  readonly defaultText?: string;
  /** The key's sentence in devop.schema.json and docs/config.md. */
  readonly doc?: string;
  /** Where `devop exec --help` lists the flag; none: not an exec flag. */
  readonly group?: ExecHelpGroup;
}

const OUTPUT_MODES = ['auto', 'plain', 'json'] as const;

/**
 * A request that gets no answer fails after this long: long enough for a slow API server under load (kubectl's own
 * discovery gives up after 32 s), short enough that a dead one is reported before the user gives up.
 */
const REQUEST_TIMEOUT = '30s';

/**
 * The table. The key of each entry is the name commander gives the flag's value (`--agent-ttl` → agentTtl); keys appear
 * in devop.json in this order, and `exec --help` lists each group's flags in this order.
 */
export const OPTIONS = {
  $schema: { key: '$schema', type: 'string', doc: 'Path or URL of devop.schema.json (for editors; ignored by devop).' },
  target: {
    flags: '-t, --target <target>',
    help:
      'pod/NAME, deploy/NAME, sts/NAME, rollout/NAME or apiservice/NAME, optionally /container/NAME; ' +
      'validatingwebhookconfiguration/NAME or mutatingwebhookconfiguration/NAME, optionally /webhook/NAME; ' +
      'or targetless',
    key: 'target',
    env: 'DEVOP_TARGET',
    type: 'target',
    doc:
      'What to run as: pod/NAME, deploy/NAME, statefulset/NAME, rollout/NAME (each optionally /container/NAME), ' +
      'apiservice/NAME (the pods behind an aggregated API), validatingwebhookconfiguration/NAME or ' +
      "mutatingwebhookconfiguration/NAME (optionally /webhook/NAME: the pods behind the webhooks' Service) or " +
      'targetless. No default: -t/--target when absent.',
    group: 'target',
  },
  namespace: {
    flags: '-n, --namespace <namespace>',
    help: "the target's namespace (default: the context's)",
    key: 'namespace',
    env: 'DEVOP_NAMESPACE',
    type: 'string',
    defaultText: "the context's namespace",
    doc: 'The target\'s namespace. Default: the kubeconfig context\'s namespace, else "default".',
    group: 'target',
  },
  context: {
    flags: '--context <context>',
    help: 'kubeconfig context (default: the current one)',
    key: 'context',
    env: 'DEVOP_CONTEXT',
    type: 'string',
    defaultText: 'the current context',
    doc: 'The kubeconfig context to use. Default: the current context.',
    group: 'cluster',
  },
  kubeconfig: {
    flags: '--kubeconfig <path>',
    help: 'kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)',
    key: 'kubeconfig',
    env: 'DEVOP_KUBECONFIG',
    type: 'string',
    defaultText: '$KUBECONFIG, else ~/.kube/config',
    doc: 'Path of the kubeconfig file. Default: $KUBECONFIG, else ~/.kube/config.',
    group: 'cluster',
  },
  requestTimeout: {
    flags: '--request-timeout <duration>',
    help:
      'how long to wait for the API server to answer one request: 10s, 1m, seconds; 0 = no limit ' +
      `(default: ${REQUEST_TIMEOUT})`,
    key: 'requestTimeout',
    env: 'DEVOP_REQUEST_TIMEOUT',
    type: 'kubeDuration',
    unsetDefault: REQUEST_TIMEOUT,
    doc:
      'How long devop waits for the API server to answer one request (kubectl --request-timeout syntax: "10s", ' +
      `"1m", a number of seconds; "0": no limit). Default: "${REQUEST_TIMEOUT}".`,
    group: 'cluster',
  },
  steal: {
    flags: '--steal',
    help: "take the pod's traffic: the local command answers instead of the pod",
    sets: 'incoming.mode',
    type: 'boolean',
    group: 'target',
  },
  mirror: {
    flags: '--mirror',
    help: "copy the pod's traffic to the local command; the pod still answers (the default)",
    sets: 'incoming.mode',
    type: 'boolean',
    group: 'target',
  },
  mode: {
    key: 'incoming.mode',
    env: 'DEVOP_MODE',
    type: 'enum',
    values: ['steal', 'mirror'] satisfies readonly StealMode[],
    default: 'mirror',
    doc:
      '"steal": the local process answers instead of the pod; "mirror": the pod answers, the local process gets a ' +
      'copy.',
  },
  port: {
    flags: '-p, --port <REMOTE[:LOCAL]>',
    help: "pod port to steal/mirror, repeatable (default: the container's declared ports)",
    repeatable: true,
    key: 'incoming.ports',
    type: 'portMappings',
    default: [],
    doc:
      'Pod ports to steal/mirror as REMOTE[:LOCAL]. Default []: every port the target container declares, each to ' +
      'the same local port.',
    group: 'target',
  },
  httpHeaderFilter: {
    flags: '--http-header-filter <"name: regex">',
    help: 'only HTTP requests with a matching header go to the local command',
    key: 'incoming.httpFilter.header',
    type: 'headerFilter',
    doc:
      'Steal only requests with a header matching "Name: value-regex" (name case-insensitive), e.g. ' +
      '"x-devop-user: alice".',
    group: 'http',
  },
  httpPathFilter: {
    flags: '--http-path-filter <regex>',
    help: 'only HTTP requests whose path matches go to the local command',
    key: 'incoming.httpFilter.path',
    type: 'regex',
    doc: 'Steal only requests whose path (with query) matches this regex, e.g. "^/api/v1/llamas".',
    group: 'http',
  },
  httpMethodFilter: {
    flags: '--http-method-filter <method>',
    help: 'only HTTP requests with this method go to the local command',
    key: 'incoming.httpFilter.method',
    type: 'httpMethod',
    doc: 'Steal only requests with this HTTP method (case-insensitive).',
    group: 'http',
  },
  httpBodyFilter: {
    flags: '--http-body-filter <"json-path: regex">',
    help: "only HTTP requests whose JSON body's value at the path matches go to the local command",
    key: 'incoming.httpFilter.body',
    type: 'bodyFilter',
    doc:
      'Steal only requests with a JSON body whose value at the path matches, e.g. "$.user.name: ^alice$" or ' +
      '"items[0].kind: ^Llama$". Bodies over 64 KiB go to the pod; HTTP/1.x only.',
    group: 'http',
  },
  tlsSecret: {
    flags: '--tls-secret <[PORT=]NAME>',
    help: "a filtered TLS port: the workload's kubernetes.io/tls Secret, repeatable (no PORT: every port)",
    repeatable: true,
    key: 'incoming.httpFilter.tlsSecret',
    type: 'tlsSecrets',
    besideCriteria: true,
    doc:
      'Filtered ports the workload serves TLS on: "[PORT=]NAME" of the kubernetes.io/tls Secret it serves with (no ' +
      'PORT: every port), read with your credentials; the agent ends TLS with it to filter, and the local process ' +
      'serves TLS with the same certificate.',
    group: 'http',
  },
  httpFilterMatch: {
    key: 'incoming.httpFilter.match',
    type: 'enum',
    values: ['all', 'any'],
    default: 'all',
    doc: '"all": every given criterion must match; "any": one is enough.',
  },
  flush: {
    flags: '--no-flush',
    help: "do not close the pod's existing connections when stealing starts (or resumes)",
    key: 'incoming.flush',
    type: 'boolean',
    default: true,
    doc:
      "Close the pod's existing connections when stealing starts, so keep-alive clients reconnect and reach the " +
      'local process at once.',
    group: 'incoming',
  },
  stealProbes: {
    flags: '--steal-probes',
    help: 'also steal connections from the node (kubelet probes)',
    key: 'incoming.stealProbes',
    type: 'boolean',
    default: false,
    doc:
      'Also steal connections from the node (kubelet probes). Off: probes keep reaching the pod, so it is not ' +
      'restarted.',
    group: 'incoming',
  },
  envInclude: {
    flags: '--env-include <glob>',
    help: 'pod env vars to give the local command, repeatable (default: all)',
    repeatable: true,
    key: 'env.include',
    type: 'strings',
    default: ['*'],
    doc:
      'Names (with * wildcards) of pod env vars the local process gets. KUBERNETES_SERVICE_* and KUBERNETES_PORT* ' +
      'only when named here explicitly.',
    group: 'env',
  },
  envExclude: {
    flags: '--env-exclude <glob>',
    help: 'pod env vars to leave out, repeatable',
    repeatable: true,
    flagAdds: true,
    key: 'env.exclude',
    type: 'strings',
    default: [],
    doc: 'Names (with * wildcards) of pod env vars to leave out (applied after include).',
    group: 'env',
  },
  envAllow: {
    flags: '--env-allow <name>',
    help: 'a pod env var that loads code (NODE_OPTIONS, LD_PRELOAD, …) to give the local command anyway, repeatable',
    repeatable: true,
    flagAdds: true,
    key: 'env.allow',
    type: 'strings',
    default: [],
    doc:
      'Exact names of pod env vars that make programs load code (NODE_OPTIONS, LD_PRELOAD, PYTHONPATH, ' +
      'JAVA_TOOL_OPTIONS, … listed in docs/safety.md) to give the local process anyway. They are left out ' +
      'otherwise; an exact name in env.include also keeps one.',
    group: 'env',
  },
  envOverride: {
    key: 'env.override',
    type: 'map',
    default: {},
    doc: "Variables set for the local process, over the pod's.",
  },
  envFile: {
    flags: '--env-file <path>',
    help: 'dotenv file applied over the pod env',
    key: 'env.file',
    type: 'string',
    doc: "A dotenv file whose variables are applied over the pod's (before override).",
    group: 'env',
  },
  agentImage: {
    flags: '--agent-image <image>',
    help: 'agent image (default: the one of this devop version)',
    key: 'agent.image',
    env: 'DEVOP_AGENT_IMAGE',
    type: 'string',
    defaultText: 'the image of this devop version',
    doc: 'The agent image. Default: the image of this devop version.',
    group: 'cluster',
  },
  agentNamespace: {
    flags: '--agent-namespace <namespace>',
    help: "where the agent Job runs (default: the target's namespace)",
    key: 'agent.namespace',
    env: 'DEVOP_AGENT_NAMESPACE',
    type: 'string',
    defaultText: "the target's namespace",
    doc: "Where the agent Job runs. Default: the target's namespace.",
    group: 'cluster',
  },
  agentPrivileged: {
    flags: '--agent-privileged',
    help: 'run the agent privileged (when capabilities are not enough on this node)',
    type: 'boolean',
    group: 'cluster',
  },
  reuseAgent: {
    flags: '--reuse-agent <name>',
    help:
      'reuse this running agent (its Job or ephemeral container name) even if another user started it; without it, ' +
      'only agents you started are reused',
    type: 'string',
    group: 'cluster',
  },
  ephemeral: {
    flags: '--ephemeral',
    help: 'run the agent as an ephemeral container in the target pod instead of a Job',
    key: 'agent.ephemeral',
    env: 'DEVOP_AGENT_EPHEMERAL',
    type: 'boolean',
    default: false,
    doc: 'Run the agent as an ephemeral container in the target pod instead of a Job on its node.',
    group: 'cluster',
  },
  agentTtl: {
    flags: '--agent-ttl <seconds>',
    help: 'ttlSecondsAfterFinished of the agent Job',
    key: 'agent.ttlSeconds',
    flagDuration: true,
    type: 'integer',
    min: 0,
    max: 86400,
    default: 30,
    doc:
      'How long the finished agent Job (and its pod, for kubectl logs) stays before the cluster removes it: its ' +
      'ttlSecondsAfterFinished, in seconds.',
    group: 'cluster',
  },
  startupTimeout: {
    flags: '--startup-timeout <seconds>',
    help: 'how long to wait for the agent, and for the local command to listen on its ports',
    key: 'agent.startupTimeoutSeconds',
    flagDuration: true,
    // Seconds with a fraction: the flag takes 1500ms.
    type: 'number',
    min: 1,
    max: 3600,
    default: 60,
    doc: 'How long to wait for the agent, and for the local command to listen on its ports (seconds).',
    group: 'cluster',
  },
  agentLabels: { key: 'agent.labels', type: 'map', default: {}, doc: 'Extra labels on the agent pod.' },
  agentAnnotations: { key: 'agent.annotations', type: 'map', default: {}, doc: 'Extra annotations on the agent pod.' },
  agentTolerations: {
    key: 'agent.tolerations',
    type: 'tolerations',
    default: [],
    doc: 'Tolerations for the agent pod (e.g. for tainted nodes).',
  },
  remoteFile: {
    flags: '--remote-file <path>',
    help: 'file of the target container to copy under $DEVOP_ROOT (same path), repeatable',
    repeatable: true,
    flagAdds: true,
    key: 'remoteFiles',
    type: 'paths',
    default: [],
    doc:
      'Absolute paths in the target container to read through the agent (e.g. ' +
      '/var/run/secrets/kubernetes.io/serviceaccount/token).',
    group: 'outgoing',
  },
  outgoingInclude: {
    flags: '--outgoing-include <rule>',
    help: 'only these destinations go through the pod: HOST, *.DOMAIN, IP, CIDR, [:PORT], repeatable',
    repeatable: true,
    key: 'outgoing.include',
    type: 'strings',
    default: [],
    doc:
      'Only these destinations go through the pod (host, *.domain, CIDR, optionally :port). Default []: all but ' +
      'exclude.',
    group: 'outgoing',
  },
  outgoingExclude: {
    flags: '--outgoing-exclude <rule>',
    help: 'destinations that stay local (same forms), repeatable; loopback always does',
    repeatable: true,
    flagAdds: true,
    key: 'outgoing.exclude',
    type: 'strings',
    default: [],
    doc: 'Destinations that stay local (same forms as include); loopback always stays local.',
    group: 'outgoing',
  },
  outgoing: {
    flags: '--no-outgoing',
    help: "keep the local command's outgoing connections and DNS local",
    key: 'outgoing.enabled',
    env: 'DEVOP_OUTGOING',
    type: 'boolean',
    default: true,
    doc: "Send the local process's outgoing connections through the pod.",
    group: 'outgoing',
  },
  proxyEnv: {
    flags: '--no-proxy-env',
    help: 'do not set HTTP(S)_PROXY / ALL_PROXY / NO_PROXY for the local command',
    key: 'outgoing.proxy',
    type: 'boolean',
    default: true,
    doc: 'Set HTTP(S)_PROXY / ALL_PROXY / NO_PROXY for the local process (a local SOCKS5 + HTTP CONNECT proxy).',
    group: 'outgoing',
  },
  nodePreload: {
    flags: '--no-node-preload',
    help: 'do not add the Node preload to NODE_OPTIONS',
    key: 'outgoing.nodePreload',
    type: 'boolean',
    default: true,
    doc:
      'For Node local processes: route net.connect and dns.lookup through the pod transparently ' +
      '(NODE_OPTIONS=--import).',
    group: 'outgoing',
  },
  nativePreload: {
    flags: '--no-native-preload',
    help: 'do not add the outgoing shim for dynamically linked programs to LD_PRELOAD',
    key: 'outgoing.nativePreload',
    type: 'boolean',
    default: true,
    doc:
      'For dynamically linked local processes (Python, Java, Ruby, C; glibc, Linux): route connect() and getaddrinfo ' +
      'through the pod transparently (LD_PRELOAD=dist/devop-outgoing.so, where it was built).',
    group: 'outgoing',
  },
  outgoingNetns: {
    flags: '--outgoing-netns',
    help:
      'run the command in a network namespace of its own where every TCP connect and DNS query goes through devop ' +
      '(Linux; for statically linked programs, Go)',
    key: 'outgoing.netns',
    type: 'boolean',
    default: false,
    doc:
      'Linux: run the local process in a network namespace of its own (a user namespace too when not root) whose TCP ' +
      'connects and UDP DNS queries all reach devop, which applies the outgoing rules: statically linked programs ' +
      '(Go) reach the cluster too (dist/devop-netns, nftables).',
    group: 'outgoing',
  },
  dns: {
    key: 'dns.enabled',
    env: 'DEVOP_DNS',
    type: 'boolean',
    default: true,
    doc: "Resolve the local process's DNS names through the pod (cluster DNS).",
  },
  allPods: {
    flags: '--all-pods',
    help: 'steal/mirror on every Ready pod of a deploy/sts target (new pods join, gone pods drop; always for webhooks)',
    key: 'allPods',
    type: 'boolean',
    default: false,
    doc: 'Steal/mirror on every pod of the target, not just one.',
    group: 'target',
  },
  allowHostNetwork: {
    flags: '--allow-host-network',
    help: "take a pod on its node's network (hostNetwork: true): steal, mirror and flush then act node-wide",
    key: 'allowHostNetwork',
    type: 'boolean',
    default: false,
    doc:
      "Take a target pod that uses its node's network (hostNetwork: true). Its netns is the node's: a steal or " +
      "mirror takes the port's traffic for every pod on the node, a flush closes all of the node's connections on " +
      'it. Off: such a pod is refused. A project devop.json cannot turn it on alone (see "Keys a project file cannot ' +
      'set alone").',
    group: 'target',
  },
  record: {
    flags: '--record <file>',
    help: 'write every stolen HTTP exchange (request, answer, timing, pod) to FILE as HAR 1.2; see devop replay',
    type: 'string',
    group: 'incoming',
  },
  recordSecrets: {
    flags: '--record-secrets',
    help:
      'keep credentials in the --record HAR (Authorization, cookies, X-Remote-* headers, Secret values); by default ' +
      'they are redacted',
    key: 'recordSecrets',
    env: 'DEVOP_RECORD_SECRETS',
    type: 'boolean',
    default: false,
    doc:
      'Keep credentials in the HAR that --record writes: Authorization, Proxy-Authorization, Cookie, Set-Cookie and ' +
      "the aggregator's X-Remote-* headers, and the values of Secrets (an AdmissionReview's object and oldObject) " +
      'and minted tokens in JSON bodies. Off: each is replaced by a marker. The file is 0600 either way; devop ' +
      'prints one warning line when it keeps them.',
    group: 'incoming',
  },
  shadow: {
    flags: '--shadow',
    help:
      "run beside the real workload, writing nothing: the command's kubeconfig points at a local API proxy " +
      '(reads pass, writes are dry runs and listed, Leases stay in memory)',
    key: 'shadow.enabled',
    env: 'DEVOP_SHADOW',
    type: 'boolean',
    default: false,
    doc:
      'Give the local process a kubeconfig (KUBECONFIG) that points at a local API proxy: reads and watches pass ' +
      'with your credentials, every write is sent with dryRun=All and reported, leader-election Leases are kept ' +
      'in memory.',
    group: 'target',
  },
  inCluster: {
    flags: '--in-cluster',
    help: 'with --shadow: also set KUBERNETES_SERVICE_HOST/PORT and a service-account token under $DEVOP_ROOT',
    key: 'shadow.inCluster',
    type: 'boolean',
    default: false,
    doc:
      'With shadow: also point in-cluster config at the proxy (KUBERNETES_SERVICE_HOST/PORT, and token, ca.crt ' +
      'and namespace under $DEVOP_ROOT/var/run/secrets/kubernetes.io/serviceaccount/).',
    group: 'target',
  },
  replace: {
    flags: '--replace',
    help: 'run in place of a deploy/sts/rollout: scale it to 0, run on a copy of its pod, restore it after',
    key: 'replace',
    type: 'boolean',
    default: false,
    doc:
      'Run in place of the target workload (deploy/sts/rollout): a copy of its pod (command replaced by a waiting ' +
      'one) carries the agent, the workload is scaled to 0, and its replica count is restored when the session ends ' +
      "(by an in-cluster guard if devop dies). With --steal the copy keeps the workload's labels and gets its traffic.",
    group: 'target',
  },
  config: {
    flags: '-f, --config <path>',
    help: 'devop.json to read (default: ./devop.json if present)',
    type: 'string',
    group: 'output',
  },
  trustConfig: {
    flags: '--trust-config',
    help:
      'use what devop.json sets for context, kubeconfig, replace, agent.image and allowHostNetwork (or set ' +
      'DEVOP_TRUST_CONFIG=1); refused otherwise',
    type: 'boolean',
    group: 'output',
  },
  output: {
    flags: '--output <mode>',
    help: 'output: auto (terminal UI when interactive), plain or json',
    choices: OUTPUT_MODES,
    type: 'enum',
    default: 'auto',
    group: 'output',
  },
  verbose: {
    flags: '-v, --verbose',
    help: 'more output, and stacks of internal errors',
    type: 'boolean',
    group: 'output',
  },

  // The flags of one command each.
  local: {
    flags: '-L, --local <[LOCAL:]HOST:PORT>',
    help: 'forward 127.0.0.1:LOCAL (default: PORT) to HOST:PORT as the pod reaches it, repeatable',
    repeatable: true,
    key: 'portForward.local',
    type: 'strings',
    default: [],
    doc:
      'devop port-forward -L: "[LOCAL:]HOST:PORT" entries; 127.0.0.1:LOCAL (default: PORT) is forwarded to HOST:PORT ' +
      'as the pod reaches it. -L on the command line replaces the list.',
  },
  remote: {
    flags: '-R, --remote <[REMOTE:]HOST:PORT>',
    help:
      "steal the target pod's port REMOTE (default: PORT) to HOST:PORT here (with --mirror: copy it), repeatable; " +
      '-R PORT and -R REMOTE:LOCAL mean 127.0.0.1',
    repeatable: true,
    key: 'portForward.remote',
    type: 'strings',
    default: [],
    doc:
      'devop port-forward -R: "[REMOTE:]HOST:PORT" entries (or "PORT", "REMOTE:LOCAL" for 127.0.0.1); the target ' +
      "pod's port REMOTE (default: PORT) is stolen to HOST:PORT on this machine. -R on the command line replaces " +
      'the list.',
  },
  address: { flags: '--address <address>', help: 'local address to listen on', type: 'string', default: '127.0.0.1' },
  allNamespaces: { flags: '-A, --all-namespaces', help: 'look in every namespace', type: 'boolean' },
  dryRun: { flags: '--dry-run', help: 'only list what would be removed', type: 'boolean' },
  force: {
    flags: '--force',
    help: 'also remove agents that still run beside a live target pod (they may serve a session)',
    type: 'boolean',
  },
  dir: { flags: '--dir <folder>', help: 'the workspace folder (default: the current folder)', type: 'string' },
  label: { flags: '--label <label>', help: 'label of the task', type: 'string', default: 'devop: exec' },
  inspectPort: {
    flags: '--inspect-port <port>',
    help: 'Node inspector port the debugger attaches to',
    type: 'string',
    // Node's default inspector port.
    default: '9229',
  },
  to: {
    flags: '--to <port>',
    help:
      "the local command's port (default: the ports the HAR names, only when your devop recorded it on this " +
      'machine)',
    type: 'string',
  },
  filter: {
    flags: '--filter <regex>',
    help: 'replay only the requests whose "METHOD PATH" matches, e.g. --filter \'GET .*/llamas\'',
    type: 'string',
  },
  ignore: {
    flags: '--ignore <field>',
    help:
      'a JSON field whose value may differ (a name anywhere, or a dotted path such as metadata.uid), repeatable; ' +
      'creationTimestamp, resourceVersion and managedFields always may',
    repeatable: true,
    type: 'strings',
  },
  devopCommand: {
    flags: '--devop-command <command>',
    help: 'how the task starts devop (split on spaces; default: this devop)',
    type: 'string',
  },
} as const satisfies Record<string, OptionSpec>;

export type OptionName = keyof typeof OPTIONS;

/** An object of devop.json: its doc sentence; `optional`: absent unless written (no defaults inside). */
export interface ConfigSection {
  readonly doc: string;
  readonly optional?: boolean;
  /** A flag for one of its keys drops the file's values of every key that has a flag (flags.ts). */
  readonly flagsReplace?: boolean;
}

/** The objects of devop.json, in the order docs/config.md shows them. */
export const CONFIG_SECTIONS = {
  incoming: { doc: 'Traffic that reaches the pod.' },
  'incoming.httpFilter': {
    doc: 'HTTP filter: only matching requests go to the local process, all others still reach the pod (steal mode).',
    optional: true,
    // One filter is one rule: a flag for any criterion replaces the file's criteria (its match stays).
    flagsReplace: true,
  },
  env: { doc: "The pod's environment for the local process." },
  agent: { doc: 'The in-cluster agent.' },
  outgoing: { doc: "The local process's outgoing connections." },
  dns: { doc: 'Name resolution for the local process.' },
  shadow: { doc: "Shadow mode: the local process's Kubernetes API requests go through a proxy that writes nothing." },
  portForward: { doc: 'devop port-forward: its forwards, as -L and -R give them.' },
} as const satisfies Readonly<Record<string, ConfigSection>>;
export const CONFIG_DOC = 'devop configuration (devop.json).';

/** The section at a key path (`incoming.httpFilter`), if there is one. */
export function configSection(path: string): ConfigSection | undefined {
  return (CONFIG_SECTIONS as Readonly<Record<string, ConfigSection>>)[path];
}

/** The flags of every command that talks to the cluster (kubectl's names and syntax), spread into each. */
export const CONNECTION_OPTIONS = ['context', 'kubeconfig', 'requestTimeout'] as const satisfies readonly OptionName[];

type ExecName<K extends OptionName> = (typeof OPTIONS)[K] extends { group: ExecHelpGroup } ? K : never;
/** The flags of `devop exec` (the entries with a help group). */
export type ExecOptionName = { [K in OptionName]: ExecName<K> }[OptionName];
export const EXEC_OPTIONS = (Object.keys(OPTIONS) as OptionName[]).filter(
  (name): name is ExecOptionName => 'group' in OPTIONS[name],
);

/** What commander hands over for a flag: a list when repeatable, a string when it takes a value, else a boolean. */
type FlagValue<S> = S extends { flags: `${string}<${string}` }
  ? S extends { repeatable: true }
    ? string[]
    : string
  : boolean;
/** The values of the given flags as commander hands them over (undefined = not given). */
export type FlagValues<N extends OptionName> = { [K in N]?: FlagValue<(typeof OPTIONS)[K]> };
