// The TUI's view state: output split into lines (partial lines held, escape codes removed), the list capped, counters,
// gRPC calls.
import { describe, expect, it } from 'vitest';
import { MAX_ROWS, applyEvent, clearTraffic, initialViewState, type ViewState } from './state.js';
import type { ReportEvent } from '../reporter.js';

const fold = (events: ReportEvent[], state: ViewState = initialViewState(0)) =>
  events.reduce((current, event) => applyEvent(current, event, 1), state);

describe('view state', () => {
  it('splits the local command output into lines, holds a partial line, and strips escape codes', () => {
    // Given output in chunks that split a line, with colours and a carriage-return progress line
    const state = fold([
      { type: 'output', stream: 'stdout', text: 'listen\u001b[32ming\u001b[0m on ' },
      { type: 'output', stream: 'stdout', text: '3000\nprogress 10%\rprogress 100%\n\u001b[2Jhalf' },
      { type: 'output', stream: 'stderr', text: 'warn: x\n' },
    ]);
    // Then complete lines are shown without escapes, the partial line waits
    expect(state.output).toEqual([
      { stream: 'stdout', text: 'listening on 3000' },
      { stream: 'stdout', text: 'progress 100%' },
      { stream: 'stderr', text: 'warn: x' },
    ]);
    expect(state.partial.stdout).toBe('half');
    // And the exit flushes it
    expect(fold([{ type: 'exit', code: 0 }], state).output.at(-1)).toEqual({ stream: 'stdout', text: 'half' });
  });

  it('keeps at most MAX_ROWS rows and the counters count everything', () => {
    // Given more requests than the list keeps
    const events: ReportEvent[] = [];
    for (let i = 0; i < MAX_ROWS + 20; i += 1) {
      events.push({ type: 'request', id: `r${i}`, port: 80, method: 'GET', path: `/${i}`, to: 'local' });
      events.push({ type: 'response', id: `r${i}`, status: i % 100 === 0 ? 500 : 200, ms: 1, bytes: 10 });
    }
    const state = fold(events);
    // Then the oldest rows are dropped, the newest kept, and nothing is lost from the counters
    expect(state.rows).toHaveLength(MAX_ROWS);
    expect(state.rows[0].path).toBe('/20');
    expect(state.rows.at(-1)).toMatchObject({ path: `/${MAX_ROWS + 19}`, status: 200, done: true });
    expect(state.counters).toMatchObject({ requests: MAX_ROWS + 20, bytesOut: (MAX_ROWS + 20) * 10, errors: 6 });
    // And c clears list and counters but not the session
    const cleared = clearTraffic({ ...state, session: { target: 't', namespace: 'n', ports: [] } });
    expect(cleared.rows).toEqual([]);
    expect(cleared.counters.requests).toBe(0);
    expect(cleared.session?.target).toBe('t');
  });

  it('a non-fatal error is a notice, not a failure', () => {
    // Given the listen step still waiting, with an error that says so
    const state = fold([
      { type: 'step', id: 'listen', status: 'start', title: 'waiting for the local command to listen on :3000' },
      {
        type: 'error',
        step: 'listen',
        message: 'the local command does not listen on 127.0.0.1:3000 after 60 s',
        hint: 'make it listen',
      },
    ]);
    // Then it is shown as a notice and no step failed
    expect(state.notices).toEqual([
      {
        level: 'error',
        message: 'the local command does not listen on 127.0.0.1:3000 after 60 s',
        hint: 'make it listen',
        step: 'listen',
      },
    ]);
    expect(state.steps.map((step) => step.status)).toEqual(['running']);
  });

  it('a request and a connection with the same id are two rows, each updated by its own events', () => {
    // Given the agent numbering requests and connections separately (both "8080-1")
    const state = fold([
      { type: 'request', id: '8080-1', port: 8080, method: 'GET', path: '/a', to: 'local' },
      { type: 'connection', id: '8080-1', port: 8080, remote: '10.0.0.2:4000', to: 'pod', state: 'open' },
      { type: 'response', id: '8080-1', status: 204, ms: 2, bytes: 0 },
      {
        type: 'connection',
        id: '8080-1',
        port: 8080,
        remote: '10.0.0.2:4000',
        to: 'pod',
        state: 'closed',
        bytesIn: 5,
        bytesOut: 7,
      },
    ]);
    // Then there are two rows with distinct keys, each completed by its own kind of event
    expect(state.rows.map((row) => [row.kind, row.key, row.status, row.bytesIn])).toEqual([
      ['http', 0, 204, undefined],
      ['tcp', 1, undefined, 5],
    ]);
  });

  it('a gRPC call is a row "gRPC Service/Method" with its grpc-status; a server fault counts as an error', () => {
    // Given two gRPC calls, one answered OK and one UNAVAILABLE (14), both with HTTP status 200
    const grpc = { service: 'pkg.Echo', method: 'Unary' };
    const state = fold([
      { type: 'request', id: '1', port: 50051, method: 'POST', path: '/pkg.Echo/Unary', to: 'local', grpc },
      { type: 'request', id: '2', port: 50051, method: 'POST', path: '/pkg.Echo/Unary', to: 'pod', grpc },
      { type: 'response', id: '1', status: 200, ms: 2, bytes: 9, grpcStatus: 0 },
      { type: 'response', id: '2', status: 200, ms: 2, bytes: 0, grpcStatus: 14 },
    ]);
    // Then the rows name the call and carry the status, and the UNAVAILABLE one is counted as an error
    expect(state.rows.map((row) => [row.method, row.path, row.grpcStatus])).toEqual([
      ['gRPC', 'pkg.Echo/Unary', 0],
      ['gRPC', 'pkg.Echo/Unary', 14],
    ]);
    expect(state.counters.errors).toBe(1);
  });
});
