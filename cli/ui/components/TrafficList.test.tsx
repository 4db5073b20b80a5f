// The traffic list: one line per HTTP request, gRPC call or connection, newest last, capped to the visible height.
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { TrafficList } from './TrafficList.js';
import { applyEvent, initialViewState, type ViewState } from '../state.js';
import type { ReportEvent } from '../../reporter.js';

function fold(events: ReportEvent[]): ViewState {
  return events.reduce(
    (state, event) => applyEvent(state, event, new Date(2026, 0, 1, 12, 30, 5).getTime()),
    initialViewState(0),
  );
}

describe('TrafficList', () => {
  it('shows time, method, path, status, duration, bytes and where each request went', () => {
    // Given a request answered locally, one still waiting, one passed to the pod and a closed TCP connection
    const state = fold([
      { type: 'request', id: 'a', port: 3000, method: 'GET', path: '/llamas', to: 'local' },
      { type: 'response', id: 'a', status: 200, ms: 3, bytes: 2048 },
      { type: 'request', id: 'b', port: 3000, method: 'POST', path: '/slow', to: 'local' },
      { type: 'request', id: 'c', port: 3000, method: 'GET', path: '/healthz', to: 'pod', pod: 'echo-1' },
      { type: 'response', id: 'c', status: 500, ms: 1200, bytes: 10 },
      { type: 'connection', id: 't', port: 5432, remote: '10.0.0.9:40000', to: 'local', state: 'open' },
      {
        type: 'connection',
        id: 't',
        port: 5432,
        remote: '10.0.0.9:40000',
        to: 'local',
        state: 'closed',
        bytesIn: 100,
        bytesOut: 5000,
      },
    ]);
    // When rendered
    const { lastFrame } = render(<TrafficList rows={state.rows} height={10} width={100} />);
    const lines = (lastFrame() ?? '').split('\n');
    // Then there is one line per row, in arrival order, with each column
    expect(lines).toHaveLength(4);
    expect(lines[0]).toMatch(/^12:30:05 :3000\s+GET\s+\/llamas\s+200\s+3 ms\s+2\.0 KiB → local$/);
    expect(lines[1]).toMatch(/POST\s+\/slow\s+…\s+→ local$/);
    expect(lines[2]).toMatch(/GET\s+\/healthz\s+500\s+1\.2 s\s+10 B → pod echo-1$/);
    expect(lines[3]).toMatch(/:5432\s+TCP\s+10\.0\.0\.9:40000\s+closed.*100 B\/4\.9 KiB → local$/);
    // And the counters count them
    expect(state.counters).toEqual({
      requests: 3,
      connections: 1,
      bytesIn: 100,
      bytesOut: 2048 + 10 + 5000,
      errors: 1,
    });
  });

  it('turns a connection the local command did not answer in time into one answered by the pod, and says so', () => {
    // Given a webhook connection to the local command that the pod answered after 4 s
    const conn = { type: 'connection', id: 'w', port: 8443, remote: '10.0.0.2:5000', pod: 'echo-1' } as const;
    const state = fold([
      { ...conn, to: 'local', state: 'open' },
      { ...conn, to: 'pod', state: 'open', fallbackMs: 4000 },
      { ...conn, to: 'pod', state: 'closed', bytesIn: 900, bytesOut: 2000 },
    ]);
    // When rendered
    const { lastFrame } = render(<TrafficList rows={state.rows} height={10} width={80} />);
    // Then one row, closed, to the pod, with why
    expect(state.rows).toHaveLength(1);
    expect(state.counters.connections).toBe(1);
    expect(lastFrame()).toMatch(/:8443\s+TCP\s+10\.0\.0\.2:5000\s+closed.* → pod echo-1 \(fallback 4\.0 s\)$/);
  });

  it('shows only the newest rows that fit the height', () => {
    // Given 30 requests
    const events: ReportEvent[] = Array.from(
      { length: 30 },
      (_, i) => ({ type: 'request', id: `r${i}`, port: 80, method: 'GET', path: `/n/${i}`, to: 'local' }) as const,
    );
    const state = fold(events);
    // When the list has room for 5
    const { lastFrame } = render(<TrafficList rows={state.rows} height={5} width={100} />);
    const frame = lastFrame() ?? '';
    // Then the last five are shown and older ones are not
    expect(frame.split('\n')).toHaveLength(5);
    expect(frame).toContain('/n/29');
    expect(frame).toContain('/n/25');
    expect(frame).not.toContain('/n/24 ');
  });

  it('shows a write of a shadowed command with its result and, below it, what it would change', () => {
    // Given a dry-run patch of a Deployment, a Lease kept in memory and a refused create
    const state = fold([
      {
        type: 'write',
        id: '1',
        verb: 'patch',
        kind: 'Deployment',
        resource: 'deployments',
        namespace: 'default',
        name: 'hello',
        status: 200,
        result: 'dry-run',
        before: { spec: { replicas: 2 }, metadata: { resourceVersion: '7' } },
        after: { spec: { replicas: 3 }, metadata: { resourceVersion: '7' } },
      },
      {
        type: 'write',
        id: '2',
        verb: 'create',
        kind: 'Lease',
        resource: 'leases',
        namespace: 'default',
        name: 'ctl',
        status: 201,
        result: 'in memory',
        before: null,
        after: { spec: {} },
      },
      {
        type: 'write',
        id: '3',
        verb: 'create',
        kind: 'configmaps',
        resource: 'configmaps',
        namespace: 'default',
        status: 422,
        result: 'refused',
        message: 'metadata.name: Invalid value',
      },
    ]);
    // When rendered
    const { lastFrame } = render(<TrafficList rows={state.rows} height={10} width={100} />);
    const lines = (lastFrame() ?? '').split('\n');
    // Then each write has its line and its changes below it
    expect(lines[0]).toMatch(/12:30:05 write PATCH\s+Deployment default\/hello\s+200 dry-run/);
    expect(lines[1]).toContain('± spec.replicas: 2 → 3');
    expect(lines[2]).toMatch(/write CREATE\s+Lease default\/ctl\s+201 in memory/);
    expect(lines[3]).toContain('± created');
    expect(lines[4]).toMatch(/write CREATE\s+configmaps\s+422 refused/);
    expect(lines[5]).toContain('± metadata.name: Invalid value');
    // And a list shorter than the rows' lines shows the newest rows whole
    const short = render(<TrafficList rows={state.rows} height={3} width={100} />).lastFrame() ?? '';
    expect(short.split('\n')).toHaveLength(2);
    expect(short).toContain('configmaps');
  });

  it('shows a gRPC call as "gRPC", its Service/Method and grpc-status: OK, the code, or reset', () => {
    // Given three calls of one method: answered OK, failed with PERMISSION_DENIED (7), and reset without a status
    const grpc = { service: 'pkg.Echo', method: 'Unary' };
    const call = { type: 'request', port: 50051, method: 'POST', path: '/pkg.Echo/Unary', to: 'local', grpc } as const;
    const state = fold([
      { ...call, id: '1' },
      { type: 'response', id: '1', status: 200, ms: 3, bytes: 20, grpcStatus: 0 },
      { ...call, id: '2' },
      { type: 'response', id: '2', status: 200, ms: 4, bytes: 0, grpcStatus: 7, grpcMessage: 'no' },
      { ...call, id: '3' },
      { type: 'response', id: '3', status: 200, ms: 500, bytes: 0 },
    ]);
    // When rendered
    const { lastFrame } = render(<TrafficList rows={state.rows} height={10} width={100} />);
    const lines = (lastFrame() ?? '').split('\n');
    // Then each line names the call and its gRPC status where an HTTP status would be
    expect(lines[0]).toMatch(/:50051 gRPC\s+pkg\.Echo\/Unary\s+OK\s+3 ms\s+20 B → local$/);
    expect(lines[1]).toMatch(/gRPC\s+pkg\.Echo\/Unary\s+7\s+4 ms/);
    expect(lines[2]).toMatch(/gRPC\s+pkg\.Echo\/Unary\s+reset\s+500 ms/);
  });
});
