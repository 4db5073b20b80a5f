// The devop wire protocol's messages, defined once: ClientMessage (CLI→agent), AgentMessage (agent→CLI), the header of
// a new stream (StreamOpen) and of its acceptance (StreamAccept), grouped by feature. The framing lives in codec.ts.
//
// COMPATIBILITY (read before changing anything here; docs/protocol.md says the same):
// - Appending a new message `type`, a new StreamOpen `kind`, or a new *optional* field does not break the wire: a peer
//   only sends it when the other side listed the matching feature in its hello/helloOk `features`.
// - Everything else breaks the wire and must bump PROTOCOL_VERSION: renaming or removing a type/kind/field, making a
// field   required, narrowing a field's values, changing a field's meaning, or any change to the frame layout in
// codec.ts.
// - The handshake messages (hello, helloOk, error, bye) keep their shape forever so that a version mismatch can always
// be   reported as a clear error rather than a parse failure.
// zod/mini: the same schemas in a tree-shakable form; the agent bundle (and its memory) stays small.
import * as z from 'zod/mini';

/** Bumped on every wire-breaking change (see the compatibility note above). */
export const PROTOCOL_VERSION = 1;

/** Optional capabilities a side announces in hello/helloOk; a peer uses an appended message kind only if announced. */
export const FEATURES = {
  steal: 'steal',
  mirror: 'mirror',
  httpFilter: 'http-filter',
  outgoing: 'outgoing',
  dns: 'dns',
  env: 'env',
  files: 'files',
  traffic: 'traffic',
  pause: 'pause',
  /** subscribe.answerWithinMs: unanswered stolen connections are replayed to the pod (webhook targets). */
  answerFallback: 'answer-fallback',
  /**
   * The client reports the connections it is handed whole from their streams: for an incoming stream whose OPEN
   * carries `connId`, the agent sends no connection traffic events (the stream says all they would).
   */
  streamEvents: 'stream-events',
  /**
   * The agent's native data path (agent/native/splice.c): the client opens a second port of the same port-forward
   * (the agent's port + 1, AGENT_ENV.nativePort) and joins it with `nativeJoin`; the agent may then hand whole steals
   * over that connection instead of the first. Only with stream-events: the native path sends no traffic events.
   */
  nativeSplice: 'native-splice',
  /** HttpFilter.body: the agent reads a JSON request body (up to MAX_FILTERED_BODY_BYTES) to decide a request. */
  bodyFilter: 'body-filter',
  /** `udp` streams: the agent relays datagrams (shared/udp-datagrams.ts) from a UDP socket in the pod's netns. */
  udp: 'udp',
  /** subscribe.tls: the agent terminates TLS on a filtered port with the workload's certificate the client sends. */
  tlsTerminate: 'tls-terminate',
} as const;

/** Error codes an agent sends in `error`; unknown codes must be shown as-is (the field is an open string). */
export const ERROR_CODES = {
  versionMismatch: 'version_mismatch',
  badToken: 'bad_token',
  badRequest: 'bad_request',
  notFound: 'not_found',
  portInUse: 'port_in_use',
  unsupported: 'unsupported',
  internal: 'internal',
} as const;

const port = z.int().check(z.minimum(1), z.maximum(65535));
const requestId = z.string().check(z.minLength(1), z.maxLength(200));
const reason = z.string().check(z.maxLength(4096));

// ---- shared pieces ----

export const StealMode = z.enum(['steal', 'mirror']);
export type StealMode = z.infer<typeof StealMode>;

/** Which HTTP requests a filtered steal takes; anything else still goes to the pod's own app. */
export const HttpFilter = z.object({
  /** `name: value-regex`, e.g. `x-devop-user: alice` (header name is matched case-insensitively). */
  header: z.optional(z.string()),
  /** Regex matched against the request path (with query string). */
  path: z.optional(z.string()),
  /** HTTP method, case-insensitive (e.g. GET). */
  method: z.optional(z.string()),
  /** `json-path: value-regex` matched in a JSON request body (shared/body-filter.ts); needs FEATURES.bodyFilter. */
  body: z.optional(z.string()),
  /** `all`: every given criterion must match; `any`: one is enough. */
  match: z._default(z.enum(['all', 'any']), 'all'),
});
export type HttpFilter = z.infer<typeof HttpFilter>;

/** The bound of one PEM in subscribe.tls (a certificate chain is a few KiB); the CLI refuses a larger one first. */
export const MAX_TLS_PEM_CHARS = 256 * 1024;
const pem = z.string().check(z.minLength(1), z.maxLength(MAX_TLS_PEM_CHARS));

/** A kubernetes.io/tls Secret's PEMs (tls.crt, tls.key, ca.crt when present), for the agent to terminate TLS with. */
export const TlsMaterial = z.object({ cert: pem, key: pem, ca: z.optional(pem) });
export type TlsMaterial = z.infer<typeof TlsMaterial>;

export const ClientIdentity = z.object({
  user: z.string(),
  host: z.string(),
  pid: z.int(),
  devopVersion: z.string(),
});
export type ClientIdentity = z.infer<typeof ClientIdentity>;

/** Who currently holds a port (sent when a subscribe is refused). */
export const Holder = z.object({ user: z.string(), host: z.string(), since: z.string() });

export const TrafficEvent = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('connection'),
    connId: z.string(),
    port,
    remoteAddress: z.string(),
    remotePort: z.int(),
    to: z.enum(['local', 'pod']),
    phase: z.enum(['open', 'close']),
    bytesIn: z.optional(z.int()),
    bytesOut: z.optional(z.int()),
    /** Set when the connection went to the pod after this many ms: the session had not answered (or failed first). */
    fallbackMs: z.optional(z.number()),
    at: z.number(),
  }),
  z.object({
    kind: z.literal('request'),
    requestId: z.string(),
    port,
    method: z.string(),
    path: z.string(),
    to: z.enum(['local', 'pod']),
    at: z.number(),
    /** A gRPC call (HTTP/2, content-type application/grpc): its path's service and method. */
    grpc: z.optional(z.object({ service: z.string(), method: z.string() })),
    /** Why the request went where it did when a filter could not decide it (a body over the bound). */
    note: z.optional(z.string()),
    /** A request of a filtered mirror: the pod answers it; `to: 'local'` says a copy went to the local command. */
    mirror: z.optional(z.boolean()),
  }),
  z.object({
    kind: z.literal('response'),
    requestId: z.string(),
    port,
    status: z.int(),
    durationMs: z.number(),
    bytes: z.int(),
    to: z.enum(['local', 'pod']),
    at: z.number(),
    /** A gRPC call's grpc-status and grpc-message; absent when the stream ended without one (a reset). */
    grpcStatus: z.optional(z.int()),
    grpcMessage: z.optional(z.string()),
  }),
]);
export type TrafficEvent = z.infer<typeof TrafficEvent>;

// ---- CLI → agent ----

export const ClientMessage = z.discriminatedUnion('type', [
  // handshake and liveness
  z.object({
    type: z.literal('hello'),
    protocolVersion: z.int(),
    token: z.string(),
    client: ClientIdentity,
    resumeSessionId: z.optional(z.string()),
    features: z.optional(z.array(z.string())),
  }),
  z.object({ type: z.literal('ping'), id: z.int(), sentAt: z.number() }),
  z.object({ type: z.literal('pong'), id: z.int(), sentAt: z.number() }),
  // incoming traffic
  z.object({
    type: z.literal('subscribe'),
    id: requestId,
    port,
    mode: StealMode,
    filter: z.optional(HttpFilter),
    flush: z.boolean(),
    stealProbes: z.boolean(),
    /**
     * Steal only: a connection the local command has not answered (sent no byte) within this is replayed to the pod.
     */
    answerWithinMs: z.optional(z.int().check(z.minimum(1), z.maximum(600_000))),
    /**
     * A filtered steal of a port whose workload terminates TLS: the agent terminates it with these, filters, and
     * re-encrypts towards the pod and the local command (FEATURES.tlsTerminate). Sent on the session's tunnel only.
     */
    tls: z.optional(TlsMaterial),
  }),
  z.object({ type: z.literal('unsubscribe'), id: requestId, port }),
  z.object({ type: z.literal('pause'), port: z.optional(port) }),
  z.object({ type: z.literal('resume'), port: z.optional(port) }),
  // DNS and env through the pod
  z.object({
    type: z.literal('dnsResolve'),
    id: requestId,
    name: z.string().check(z.minLength(1), z.maxLength(253)),
    family: z.optional(z.union([z.literal(4), z.literal(6)])),
  }),
  z.object({ type: z.literal('envRead'), id: requestId }),
  // native-splice: the first message on the native connection; the token is the session's id from helloOk
  z.object({ type: z.literal('nativeJoin'), token: z.string().check(z.minLength(1), z.maxLength(64)) }),
  // end of session
  z.object({ type: z.literal('bye'), reason }),
]);
export type ClientMessage = z.infer<typeof ClientMessage>;
export type Hello = Extract<ClientMessage, { type: 'hello' }>;

// ---- agent → CLI ----

export const AgentMessage = z.discriminatedUnion('type', [
  // handshake and liveness
  z.object({
    type: z.literal('helloOk'),
    protocolVersion: z.int(),
    agentVersion: z.string(),
    sessionId: z.string(),
    features: z.array(z.string()),
    target: z.optional(
      z.object({ pid: z.optional(z.int()), containerId: z.optional(z.string()), podIP: z.optional(z.string()) }),
    ),
  }),
  z.object({ type: z.literal('pong'), id: z.int(), sentAt: z.number() }),
  z.object({ type: z.literal('ping'), id: z.int(), sentAt: z.number() }),
  // incoming traffic
  z.object({ type: z.literal('subscribed'), id: requestId, port, mode: StealMode }),
  // hint (appended): the fix, when the agent knows it (older agents leave it out).
  z.object({
    type: z.literal('refused'),
    id: requestId,
    port,
    reason,
    holder: z.optional(Holder),
    hint: z.optional(z.string()),
  }),
  z.object({ type: z.literal('unsubscribed'), id: requestId, port }),
  // DNS and env through the pod; `error` is set (and addresses empty) when the name did not resolve
  z.object({
    type: z.literal('dnsResult'),
    id: requestId,
    addresses: z.array(z.object({ address: z.string(), family: z.union([z.literal(4), z.literal(6)]) })),
    error: z.optional(z.object({ code: z.string(), message: z.string() })),
  }),
  z.object({ type: z.literal('env'), id: requestId, vars: z.record(z.string(), z.string()) }),
  // observability
  z.object({ type: z.literal('traffic'), event: TrafficEvent }),
  z.object({ type: z.literal('log'), level: z.enum(['debug', 'info', 'warn', 'error']), message: z.string() }),
  // native-splice: the native connection joined its session (a bad token gets `error` and the connection closes)
  z.object({ type: z.literal('nativeJoined') }),
  // failures and end of session
  z.object({
    type: z.literal('error'),
    id: z.optional(requestId),
    code: z.string(),
    message: z.string(),
    hint: z.optional(z.string()),
  }),
  z.object({ type: z.literal('bye'), reason }),
]);
export type AgentMessage = z.infer<typeof AgentMessage>;
export type HelloOk = Extract<AgentMessage, { type: 'helloOk' }>;

// ---- streams ----

/** The header of a new stream (OPEN frame). */
export const StreamOpen = z.discriminatedUnion('kind', [
  // agent → CLI: a stolen/mirrored connection, or (filtered steal) one HTTP request whose bytes follow on the stream
  z.object({
    kind: z.literal('incoming'),
    port,
    mode: StealMode,
    remoteAddress: z.string(),
    remotePort: z.int().check(z.minimum(0), z.maximum(65535)),
    subscriptionId: z.optional(z.string()),
    /** stream-events: the connection's id; the client makes its open and close events from the stream. */
    connId: z.optional(z.string()),
    /**
     * A mirror copy the agent speaks HTTP/2 on (a filtered mirror's h2c streams): the local command's answers come
     * back on the stream (its SETTINGS and WINDOW_UPDATEs keep the copy flowing) and the agent drops them.
     */
    answers: z.optional(z.boolean()),
    request: z.optional(
      z.object({
        method: z.string(),
        path: z.string(),
        headers: z.record(z.string(), z.union([z.string(), z.array(z.string())])),
      }),
    ),
  }),
  // CLI → agent: connect to host:port from the pod's netns; the agent accepts once connected or resets with the errno
  z.object({ kind: z.literal('outgoing'), host: z.string().check(z.minLength(1), z.maxLength(253)), port }),
  // CLI → agent: read a file in the target's filesystem; the agent accepts (with size) and streams it, or resets
  z.object({ kind: z.literal('file'), path: z.string().check(z.minLength(1), z.maxLength(4096)) }),
  // CLI → agent (FEATURES.udp): a UDP association; its bytes both ways are datagrams (shared/udp-datagrams.ts), each
  // naming its peer. The agent accepts once its socket is bound; it ends the stream after 60 s without a datagram.
  z.object({ kind: z.literal('udp') }),
]);
export type StreamOpen = z.infer<typeof StreamOpen>;
type IncomingOpen = Extract<StreamOpen, { kind: 'incoming' }>;

/**
 * What StreamOpen makes of the header every stolen or mirrored connection opens with (`incoming`, no `request`),
 * decided without zod; undefined for anything else, which StreamOpen then decides. The CLI runs this once per new
 * connection, after idle time, with its caches cold: there zod/mini's generic walk of the schema cost the stolen path
 * 0.05–0.1 ms per new connection (docs/benchmarks.md), this a few µs. StreamOpen stays the definition:
 * protocol.test.ts checks, on headers generated from StreamOpen's own fields, that this accepts nothing StreamOpen
 * rejects and returns what StreamOpen returns. For JSON values only (JSON has no `undefined`).
 */
export function incomingOpen(value: unknown): IncomingOpen | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const { kind, port, mode, remoteAddress, remotePort, subscriptionId, connId, answers, request } = value as Record<
    string,
    unknown
  >;
  if (kind !== 'incoming' || request !== undefined || (mode !== 'steal' && mode !== 'mirror')) return undefined;
  if (!isInt(port, 1, 65535) || !isInt(remotePort, 0, 65535) || typeof remoteAddress !== 'string') return undefined;
  const open: IncomingOpen = { kind, port, mode, remoteAddress, remotePort };
  if (typeof subscriptionId === 'string') open.subscriptionId = subscriptionId;
  else if (subscriptionId !== undefined) return undefined;
  if (typeof connId === 'string') open.connId = connId;
  else if (connId !== undefined) return undefined;
  if (typeof answers === 'boolean') open.answers = answers;
  else if (answers !== undefined) return undefined;
  return open;
}

function isInt(value: unknown, min: number, max: number): value is number {
  return Number.isInteger(value) && (value as number) >= min && (value as number) <= max;
}

/** Optional details the accepting side sends with ACCEPT (all fields optional, so any kind may use it). */
export const StreamAccept = z.object({
  localAddress: z.optional(z.string()),
  localPort: z.optional(z.int()),
  remoteAddress: z.optional(z.string()),
  remotePort: z.optional(z.int()),
  size: z.optional(z.int()),
});
export type StreamAccept = z.infer<typeof StreamAccept>;
