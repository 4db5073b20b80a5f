// The Reporter: how services tell the user what happens. Services call it; cli/ui/ implements it (Ink, Plain, JSON,
// Null). Services never import ink or react: they only see this interface, and the helpers below that emit through it.
import { errorMessage, isUserError } from '../shared/errors.js';
import { ApiTimeoutError } from './kube/api-timeout.js';

export type StepId = 'target' | 'agent' | 'tunnel' | 'env' | 'listen' | 'traffic' | (string & {});

export type TrafficMode = 'steal' | 'mirror';

export interface PortState {
  remotePort: number;
  localPort: number;
  mode: TrafficMode;
  /** Human-readable filter, e.g. "header x-user: alice", or undefined for the whole port. */
  filter?: string;
  paused?: boolean;
}

export interface SessionInfo {
  target: string;
  namespace: string;
  pod?: string;
  node?: string;
  container?: string;
  agent?: { name: string; reused: boolean; version?: string };
  ports: PortState[];
  /** An extension target (apiservice/): what the API server calls, and its Available condition. */
  extension?: ExtensionState;
  /** A webhook configuration target: the webhooks whose requests reach the local command, and their timeouts. */
  webhooks?: { name: string; timeoutSeconds: number }[];
  /** A stolen connection the local command has not answered within this many ms is answered by the pod. */
  answerWithinMs?: number;
}

export interface ExtensionState {
  kind: 'apiservice';
  name: string;
  /** namespace/name of the Service in front of the pods. */
  service: string;
  /** Every Ready pod behind the Service is taken over (their number when the session was ready). */
  pods: number;
  available: { status: string; reason?: string; message?: string };
  /** The API server connects from the node's address, so connections from the node are taken too. */
  stealsNodeConnections: boolean;
}

/** --shadow: one write of the local command, as the shadow API proxy (cli/shadow/proxy.ts) handled it. */
export interface ShadowWrite {
  /** create | update | patch | delete | deletecollection, as kube-apiserver names the verbs. */
  verb: string;
  /** The object's kind when known (from the answer or the object before), else the resource (`deployments`). */
  kind: string;
  resource: string;
  subresource?: string;
  namespace?: string;
  name?: string;
  /** The HTTP status the local command got. */
  status: number;
  /** dry-run: the API server accepted it and stored nothing; in memory: a Lease; refused: the API server said no. */
  result: 'dry-run' | 'in memory' | 'refused';
  /** The Status message of a refused write. */
  message?: string;
  /** The object before (null: it did not exist; absent: unknown) and as the write would leave it (null: deleted). */
  before?: unknown;
  after?: unknown;
}

/** `webhook replicas.echoes.example.com (timeout 5 s)`, several joined by commas. */
export function formatWebhooks(webhooks: readonly { name: string; timeoutSeconds: number }[]): string {
  const list = webhooks.map((w) => `${w.name} (timeout ${w.timeoutSeconds} s)`).join(', ');
  return `${webhooks.length === 1 ? 'webhook' : 'webhooks'} ${list}`;
}

/** One event per line of the NDJSON output; `type` is the stable discriminator documented in docs/ui.md. */
export type ReportEvent =
  /** `hint`: on a failed step, the fix (a UserError's hint), so every reporter can show why and how to fix it. */
  | {
      type: 'step';
      id: StepId;
      status: 'start' | 'done' | 'fail';
      title: string;
      detail?: string;
      ms?: number;
      hint?: string;
    }
  | { type: 'ready'; session: SessionInfo }
  | {
      type: 'connection';
      id: string;
      port: number;
      remote: string;
      to: 'local' | 'pod';
      pod?: string;
      state: 'open' | 'closed';
      bytesIn?: number;
      bytesOut?: number;
      /** The local command had sent nothing back (or failed) after this many ms: the pod answers the connection. */
      fallbackMs?: number;
    }
  | {
      type: 'request';
      id: string;
      port: number;
      method: string;
      path: string;
      to: 'local' | 'pod';
      pod?: string;
      headers?: Record<string, string>;
      /** A gRPC call (HTTP/2, content-type application/grpc): the service and method its path names. */
      grpc?: { service: string; method: string };
      /** Why it went where it did when a filter could not decide it (a body over the bound). */
      note?: string;
      /** A request on a filtered mirror: the pod answers it; `to: 'local'` says a copy went to the local command. */
      mirror?: boolean;
    }
  | {
      type: 'response';
      id: string;
      status: number;
      ms: number;
      bytes: number;
      /** A gRPC call's grpc-status and grpc-message; absent when its stream ended without one (reset, cancelled). */
      grpcStatus?: number;
      grpcMessage?: string;
    }
  | { type: 'session'; session: SessionInfo }
  | { type: 'rtt'; ms: number }
  | { type: 'log'; level: 'debug' | 'info' | 'warn'; message: string }
  | { type: 'output'; stream: 'stdout' | 'stderr'; text: string }
  | { type: 'error'; message: string; hint?: string; step?: StepId }
  | { type: 'exit'; code: number | null; signal?: string | null }
  /** --shadow: a write of the local command, sent as a dry run (or kept in memory: a Lease); see ShadowWrite. */
  | ({ type: 'write'; id: string } & ShadowWrite);

/** What an interactive UI can ask the running session to do (keys m, p, f, q). */
export interface SessionControls {
  setMode(mode: TrafficMode): Promise<void>;
  pause(): Promise<void>;
  resume(): Promise<void>;
  setHeaderFilter(filter: string | undefined): Promise<void>;
  stop(): Promise<void>;
}

export interface Reporter {
  emit(event: ReportEvent): void;
  /** Called once the session can be steered (after `ready`); interactive reporters bind keys to it. */
  attachControls?(controls: SessionControls): void;
  /** Whether the local command's stdio should be piped through the reporter (Ink) instead of inherited. */
  readonly capturesChildOutput: boolean;
  close(): Promise<void>;
}

/** Runs one start-up step, reporting start / done (with ms) / fail. */
export async function step<T>(
  reporter: Reporter,
  id: StepId,
  title: string,
  run: () => Promise<T>,
  detail?: (value: T) => string | undefined,
): Promise<T> {
  const started = Date.now();
  reporter.emit({ type: 'step', id, status: 'start', title });
  try {
    const value = await run();
    reporter.emit({ type: 'step', id, status: 'done', title, detail: detail?.(value), ms: Date.now() - started });
    return value;
  } catch (err) {
    reporter.emit({
      type: 'step',
      id,
      status: 'fail',
      title,
      detail: errorMessage(err),
      ms: Date.now() - started,
    });
    throw err instanceof ApiTimeoutError ? err.inStep(title) : err;
  }
}

/** A line of devop's own log the user should act on (every reporter shows warnings). */
export function warn(reporter: Reporter, message: string): void {
  reporter.emit({ type: 'log', level: 'warn', message });
}

/** A line of devop's own log saying what it did. */
export function info(reporter: Reporter, message: string): void {
  reporter.emit({ type: 'log', level: 'info', message });
}

/** A line of devop's own log shown with --verbose only. */
export function debug(reporter: Reporter, message: string): void {
  reporter.emit({ type: 'log', level: 'debug', message });
}

/** A failure as an error line: what went wrong and, for a UserError, its fix. */
export function error(reporter: Reporter, err: unknown): void {
  reporter.emit({ type: 'error', message: errorMessage(err), ...(isUserError(err) ? { hint: err.hint } : {}) });
}
