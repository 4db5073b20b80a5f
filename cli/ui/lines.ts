// The stable text of devop's Plain output lines. VS Code problem matchers and scripts match these, so change them only
// together with cli/services/vscode.ts (which builds its patterns from the constants here).
import {
  formatWebhooks,
  type ExtensionState,
  type ReportEvent,
  type SessionInfo,
  type PortState,
} from '../reporter.js';
import { objectChanges } from './object-diff.js';

export const LINE_PREFIX = 'devop: ';
/** The exact line printed when the session is ready (traffic flows to the local command). */
export const READY_LINE = 'devop: ready';
export const STEP_START_MARK = '→';
export const STEP_DONE_MARK = '✓';
export const STEP_FAIL_MARK = '✗';
/** The title of the first start-up step (id `target`); the VS Code beginsPattern waits for its start line. */
export const FIRST_STEP_TITLE = 'resolve target';

/** Regex source (VS Code / JS syntax) matching the start line of the first step: `devop: → resolve target …`. */
export const BEGINS_PATTERN = `^devop: ${STEP_START_MARK} ${FIRST_STEP_TITLE}\\b`;
/** Regex source matching the ready line (and nothing else devop prints). */
export const ENDS_PATTERN = '^devop: ready$';
/**
 * Regex source matching a failure line (a failed step or an error). VS Code rejects a problem pattern without a file
 * group, and devop's failures are not about a source file: group 1 is an empty "file" (the problem is listed under the
 * workspace folder), group 2 the message.
 */
export const ERROR_PATTERN = `^devop: ()(?:${STEP_FAIL_MARK} |error(?: \\[[^\\]]+\\])?: )(.*)$`;

type StepEvent = Extract<ReportEvent, { type: 'step' }>;

export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const minutes = Math.floor(ms / 60_000);
  return `${minutes} m ${Math.round((ms % 60_000) / 1000)} s`;
}

/** gRPC status codes by number (grpc/doc/statuscodes.md). */
const GRPC_CODES = [
  'OK',
  'CANCELLED',
  'UNKNOWN',
  'INVALID_ARGUMENT',
  'DEADLINE_EXCEEDED',
  'NOT_FOUND',
  'ALREADY_EXISTS',
  'PERMISSION_DENIED',
  'RESOURCE_EXHAUSTED',
  'FAILED_PRECONDITION',
  'ABORTED',
  'OUT_OF_RANGE',
  'UNIMPLEMENTED',
  'INTERNAL',
  'UNAVAILABLE',
  'DATA_LOSS',
  'UNAUTHENTICATED',
];

/** `PERMISSION_DENIED (7)`; `no grpc-status` for a call whose stream ended without one (reset or cancelled). */
export function formatGrpcStatus(code: number | undefined): string {
  if (code === undefined) return 'no grpc-status';
  return `${GRPC_CODES[code] ?? 'code'} (${code})`;
}

/**
 * gRPC codes the server side is at fault for (UNKNOWN, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS): counted and
 * shown as errors, as an HTTP 5xx is; the others are the caller's (yellow).
 */
export function isGrpcServerFault(code: number): boolean {
  return code === 2 || (code >= 12 && code <= 15);
}

export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  if (bytes < 1024 * 1024 * 1024) return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
  return `${(bytes / 1024 / 1024 / 1024).toFixed(2)} GiB`;
}

export function formatStepLine(event: StepEvent): string {
  const mark = event.status === 'start' ? STEP_START_MARK : event.status === 'done' ? STEP_DONE_MARK : STEP_FAIL_MARK;
  const detail = event.detail ? `: ${event.detail}` : '';
  const ms = event.status !== 'start' && event.ms !== undefined ? ` (${formatDuration(event.ms)})` : '';
  return `${LINE_PREFIX}${mark} ${event.title}${detail}${ms}`;
}

/** `:3000 steal → local :3000 (header x-user: alice) [paused]` */
export function formatPort(port: PortState): string {
  const filter = port.filter ? ` (${port.filter})` : '';
  const paused = port.paused ? ' [paused: traffic goes to the pod]' : '';
  return `:${port.remotePort} ${port.mode} → local :${port.localPort}${filter}${paused}`;
}

export function formatSessionLine(session: SessionInfo): string {
  const pod = session.pod ? ` pod/${session.pod}` : '';
  const ports = session.ports.length > 0 ? ` ${session.ports.map(formatPort).join(', ')}` : ' no ports';
  const hooks = session.webhooks ? `; ${formatWebhooks(session.webhooks)}` : '';
  return `${LINE_PREFIX}session ${session.target}${pod}:${ports}${hooks}`;
}

/** `Available=True (Passed)`, or with the condition's message when it is not True. */
export function formatAvailable(available: ExtensionState['available']): string {
  const reason = available.reason ? ` (${available.reason})` : '';
  const message = available.status !== 'True' && available.message ? `: ${available.message}` : '';
  return `Available=${available.status}${reason}${message}`;
}

/** `apiservice v1alpha.farm.example.com → service default/farm-operator, 2 pods, Available=True (Passed)` */
export function formatExtension(extension: ExtensionState): string {
  const pods = `${extension.pods} pod${extension.pods === 1 ? '' : 's'}`;
  const node = extension.stealsNodeConnections ? ", the node's connections taken (the API server's)" : '';
  const available = formatAvailable(extension.available);
  return `${extension.kind} ${extension.name} → service ${extension.service}, ${pods}${node}, ${available}`;
}

/** What a write (--shadow) writes: `Deployment default/hello`, `Echo/status default/hello`, `configmaps`. */
export function writeTarget(event: Extract<ReportEvent, { type: 'write' }>): string {
  const where = event.name ? ` ${event.namespace ? `${event.namespace}/` : ''}${event.name}` : '';
  const sub = event.subresource ? `/${event.subresource}` : '';
  return `${event.kind}${sub}${where}`;
}

/** `devop: write patch Deployment default/hello → dry-run 200 (spec.replicas: 2 → 3)` (--shadow). */
export function formatWriteLine(event: Extract<ReportEvent, { type: 'write' }>): string {
  const why =
    event.result === 'refused' ? [event.message ?? ''] : objectChanges(event.before, event.after).filter(Boolean);
  const detail = why.length > 0 ? ` (${why.join('; ')})` : '';
  return `${LINE_PREFIX}write ${event.verb} ${writeTarget(event)} → ${event.result} ${event.status}${detail}`;
}
