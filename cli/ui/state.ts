// The TUI's view state and the pure function that folds one reporter event into it (the Ink components only render it).
import type { ReportEvent, SessionInfo, StepId } from '../reporter.js';
import { isGrpcServerFault, writeTarget } from './lines.js';
import { objectChanges } from './object-diff.js';

/** Rows kept for the traffic list: enough to scroll back a while, small enough that each update stays cheap. */
export const MAX_ROWS = 500;
/** Lines kept of the local command's output pane. */
export const MAX_OUTPUT_LINES = 200;
/** A partial output line longer than this is shown as it is rather than waiting for its newline. */
const MAX_PARTIAL_LINE = 4096;
const MAX_NOTICES = 5;
/** Changes kept per write (--shadow) for its diff line and the `d` panel; the NDJSON event has the whole objects. */
export const MAX_WRITE_CHANGES = 40;

export interface StepView {
  id: StepId;
  title: string;
  status: 'running' | 'done' | 'fail';
  detail?: string;
  hint?: string;
  startedAt: number;
  ms?: number;
}

export interface TrafficRow {
  /** Unique per row (the React key): ids of requests and connections come from different counters and may repeat. */
  key: number;
  id: string;
  kind: 'http' | 'tcp' | 'write';
  time: number;
  /** 0 for a write (--shadow): it reaches no pod port. */
  port: number;
  to: 'local' | 'pod';
  pod?: string;
  method?: string;
  path?: string;
  remote?: string;
  status?: number;
  ms?: number;
  bytesIn?: number;
  bytesOut?: number;
  /** Set when the local command did not answer within this many ms and the pod answered instead. */
  fallbackMs?: number;
  /** A gRPC call (method "gRPC", path "Service/Method"); grpcStatus once it ended with one. */
  grpc?: boolean;
  grpcStatus?: number;
  /** A request on a filtered mirror: nothing answers it here (the pod answers, the copy's answer is dropped). */
  mirror?: boolean;
  done: boolean;
  /** A write (--shadow): verb, what it writes (`Deployment default/hello`), dry-run / in memory / refused. */
  write?: { verb: string; object: string; result: string; changes: string[] };
}

export interface OutputLine {
  stream: 'stdout' | 'stderr';
  text: string;
}

export interface Counters {
  requests: number;
  connections: number;
  bytesIn: number;
  bytesOut: number;
  errors: number;
}

/** The failed start-up step with why and the fix (from the step itself, else from the error event about it). */
export function failureOf(state: ViewState): { id: StepId; title: string; why: string; fix?: string } | undefined {
  const failed = state.steps.find((step) => step.status === 'fail');
  if (!failed) return undefined;
  const error =
    state.lastError && (state.lastError.step === undefined || state.lastError.step === failed.id)
      ? state.lastError
      : undefined;
  const why = [failed.detail, error?.message]
    .filter((part, i, parts): part is string => Boolean(part) && parts.indexOf(part) === i)
    .join(': ');
  return { id: failed.id, title: failed.title, why: why || 'failed', fix: failed.hint ?? error?.hint };
}

export interface Notice {
  level: 'info' | 'warn' | 'error' | 'debug';
  message: string;
  hint?: string;
  /** For errors: the step they are about (the failure box shows those). */
  step?: StepId;
}

export interface ViewState {
  startedAt: number;
  steps: StepView[];
  session?: SessionInfo;
  readyAt?: number;
  rttMs?: number;
  rows: TrafficRow[];
  nextRowKey: number;
  counters: Counters;
  output: OutputLine[];
  partial: { stdout: string; stderr: string };
  notices: Notice[];
  /** The last error event: the failure box shows it when a step failed (start-up ends there). */
  lastError?: { message: string; hint?: string; step?: StepId };
  exit?: { code: number | null; signal?: string | null };
  stopping: boolean;
}

export const emptyCounters: Counters = { requests: 0, connections: 0, bytesIn: 0, bytesOut: 0, errors: 0 };

export function initialViewState(now: number): ViewState {
  return {
    startedAt: now,
    steps: [],
    rows: [],
    nextRowKey: 0,
    counters: emptyCounters,
    output: [],
    partial: { stdout: '', stderr: '' },
    notices: [],
    stopping: false,
  };
}

/** Folds one event into the state; returns a new state and leaves the old one untouched. */
export function applyEvent(state: ViewState, event: ReportEvent, now: number): ViewState {
  switch (event.type) {
    case 'step':
      return { ...state, steps: applyStep(state.steps, event, now) };
    case 'ready':
      return { ...state, session: event.session, readyAt: now };
    case 'session':
      return { ...state, session: event.session };
    case 'rtt':
      return { ...state, rttMs: event.ms };
    case 'request': {
      const row: TrafficRow = {
        key: state.nextRowKey,
        id: event.id,
        kind: 'http',
        time: now,
        port: event.port,
        to: event.to,
        pod: event.pod,
        method: event.grpc ? 'gRPC' : event.method,
        path: event.grpc ? `${event.grpc.service}/${event.grpc.method}` : event.path,
        ...(event.grpc ? { grpc: true } : {}),
        ...(event.mirror ? { mirror: true } : {}),
        done: event.mirror === true,
      };
      return {
        ...state,
        rows: appendRow(state.rows, row),
        nextRowKey: state.nextRowKey + 1,
        counters: { ...state.counters, requests: state.counters.requests + 1 },
      };
    }
    case 'response': {
      const isError = event.grpcStatus !== undefined ? isGrpcServerFault(event.grpcStatus) : event.status >= 500;
      const counters = {
        ...state.counters,
        bytesOut: state.counters.bytesOut + event.bytes,
        errors: state.counters.errors + (isError ? 1 : 0),
      };
      const rows = updateRow(state.rows, 'http', event.id, (row) => ({
        ...row,
        status: event.status,
        ms: event.ms,
        bytesOut: event.bytes,
        ...(event.grpcStatus !== undefined ? { grpcStatus: event.grpcStatus } : {}),
        done: true,
      }));
      return { ...state, rows, counters };
    }
    case 'connection': {
      const waiting = (row: TrafficRow) =>
        row.kind === 'tcp' && row.id === event.id && row.pod === event.pod && !row.done;
      if (event.state === 'open' && event.fallbackMs !== undefined && state.rows.some(waiting)) {
        // The same connection, now answered by the pod: its row says so rather than a second row appearing.
        const fallbackMs = event.fallbackMs;
        const rows = state.rows.map((row) => (waiting(row) ? { ...row, to: event.to, fallbackMs } : row));
        return { ...state, rows };
      }
      if (event.state === 'open') {
        const row: TrafficRow = {
          key: state.nextRowKey,
          id: event.id,
          kind: 'tcp',
          time: now,
          port: event.port,
          to: event.to,
          pod: event.pod,
          remote: event.remote,
          done: false,
        };
        return {
          ...state,
          rows: appendRow(state.rows, row),
          nextRowKey: state.nextRowKey + 1,
          counters: { ...state.counters, connections: state.counters.connections + 1 },
        };
      }
      const bytesIn = event.bytesIn ?? 0;
      const bytesOut = event.bytesOut ?? 0;
      const counters = {
        ...state.counters,
        bytesIn: state.counters.bytesIn + bytesIn,
        bytesOut: state.counters.bytesOut + bytesOut,
      };
      const found = state.rows.some((row) => row.kind === 'tcp' && row.id === event.id && !row.done);
      if (found)
        return {
          ...state,
          rows: updateRow(state.rows, 'tcp', event.id, (row) => ({
            ...row,
            bytesIn,
            bytesOut,
            done: true,
            ms: now - row.time,
          })),
          counters,
        };
      const row: TrafficRow = {
        key: state.nextRowKey,
        id: event.id,
        kind: 'tcp',
        time: now,
        port: event.port,
        to: event.to,
        pod: event.pod,
        remote: event.remote,
        bytesIn,
        bytesOut,
        done: true,
      };
      return { ...state, rows: appendRow(state.rows, row), nextRowKey: state.nextRowKey + 1, counters };
    }
    case 'write': {
      const row: TrafficRow = {
        key: state.nextRowKey,
        id: event.id,
        kind: 'write',
        time: now,
        port: 0,
        to: 'local',
        status: event.status,
        done: true,
        write: {
          verb: event.verb,
          object: writeTarget(event),
          result: event.result,
          changes:
            event.result === 'refused'
              ? [event.message ?? '']
              : objectChanges(event.before, event.after, MAX_WRITE_CHANGES),
        },
      };
      const errors = state.counters.errors + (event.result === 'refused' ? 1 : 0);
      return {
        ...state,
        rows: appendRow(state.rows, row),
        nextRowKey: state.nextRowKey + 1,
        counters: { ...state.counters, errors },
      };
    }
    case 'output':
      return applyOutput(state, event.stream, event.text);
    case 'log':
      return { ...state, notices: appendNotice(state.notices, { level: event.level, message: event.message }) };
    case 'error': {
      // Not every error ends the session (e.g. "the local command does not listen yet; devop keeps waiting"): it is a
      // notice; the failure box appears when a step has failed.
      const counters = { ...state.counters, errors: state.counters.errors + 1 };
      const notice: Notice = { level: 'error', message: event.message, hint: event.hint, step: event.step };
      return {
        ...state,
        counters,
        notices: appendNotice(state.notices, notice),
        lastError: { message: event.message, hint: event.hint, step: event.step },
      };
    }
    case 'exit':
      return { ...flushPartial(state), exit: { code: event.code, signal: event.signal } };
    default:
      return state;
  }
}

/** The `c` key: empties the list, the counters and the output pane; the session itself is untouched. */
export function clearTraffic(state: ViewState): ViewState {
  return { ...state, rows: [], counters: emptyCounters, output: [], notices: [] };
}

export function addNotice(state: ViewState, notice: Notice): ViewState {
  return { ...state, notices: appendNotice(state.notices, notice) };
}

function applyStep(steps: StepView[], event: Extract<ReportEvent, { type: 'step' }>, now: number): StepView[] {
  const index = findLastIndex(steps, (step) => step.id === event.id);
  const status = event.status === 'start' ? 'running' : event.status === 'done' ? 'done' : 'fail';
  if (event.status === 'start' || index < 0) {
    const startedAt = event.status === 'start' ? now : now - (event.ms ?? 0);
    return [
      ...steps,
      { id: event.id, title: event.title, status, detail: event.detail, hint: event.hint, startedAt, ms: event.ms },
    ];
  }
  const previous = steps[index];
  const next: StepView = {
    ...previous,
    title: event.title,
    status,
    detail: event.detail ?? previous.detail,
    hint: event.hint,
    ms: event.ms ?? now - previous.startedAt,
  };
  return steps.map((step, i) => (i === index ? next : step));
}

function appendRow(rows: TrafficRow[], row: TrafficRow): TrafficRow[] {
  const next = rows.length >= MAX_ROWS ? rows.slice(rows.length - MAX_ROWS + 1) : rows.slice();
  next.push(row);
  return next;
}

function updateRow(
  rows: TrafficRow[],
  kind: TrafficRow['kind'],
  id: string,
  update: (row: TrafficRow) => TrafficRow,
): TrafficRow[] {
  const index = findLastIndex(rows, (row) => row.kind === kind && row.id === id);
  if (index < 0) return rows;
  const next = rows.slice();
  next[index] = update(rows[index]);
  return next;
}

function appendNotice(notices: Notice[], notice: Notice): Notice[] {
  return [...notices.slice(-(MAX_NOTICES - 1)), notice];
}

function applyOutput(state: ViewState, stream: 'stdout' | 'stderr', text: string): ViewState {
  const combined = state.partial[stream] + stripControl(text);
  const parts = combined.split('\n');
  let rest = parts.pop() ?? '';
  const complete = parts.map((line) => ({ stream, text: lastCarriageSegment(line) }));
  if (rest.length > MAX_PARTIAL_LINE) {
    complete.push({ stream, text: rest });
    rest = '';
  }
  if (complete.length === 0) return { ...state, partial: { ...state.partial, [stream]: rest } };
  const output = [...state.output, ...complete].slice(-MAX_OUTPUT_LINES);
  return { ...state, output, partial: { ...state.partial, [stream]: rest } };
}

function flushPartial(state: ViewState): ViewState {
  const pending = (['stdout', 'stderr'] as const).filter((stream) => state.partial[stream] !== '');
  if (pending.length === 0) return state;
  const lines = pending.map((stream) => ({ stream, text: state.partial[stream] }));
  return {
    ...state,
    output: [...state.output, ...lines].slice(-MAX_OUTPUT_LINES),
    partial: { stdout: '', stderr: '' },
  };
}

// The child's output is drawn inside the layout, so its cursor movements and colours must not reach the terminal.
// CSI sequences, OSC strings (ended by BEL or ST), two-character escapes, and the other C0 controls and DEL.
const CONTROL_SEQUENCE = new RegExp(
  [
    /\u001b\[[0-?]*[ -/]*[@-~]/.source,
    /\u001b\][^\u0007\u001b]*(?:\u0007|\u001b\\)/.source,
    /\u001b[@-Z\\-_]/.source,
    /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/.source,
  ].join('|'),
  'g',
);

export function stripControl(text: string): string {
  return text.replace(CONTROL_SEQUENCE, '');
}

function lastCarriageSegment(line: string): string {
  const trimmed = line.endsWith('\r') ? line.slice(0, -1) : line;
  const at = trimmed.lastIndexOf('\r');
  return at < 0 ? trimmed : trimmed.slice(at + 1);
}

function findLastIndex<T>(items: T[], predicate: (item: T) => boolean): number {
  for (let i = items.length - 1; i >= 0; i -= 1) if (predicate(items[i])) return i;
  return -1;
}
