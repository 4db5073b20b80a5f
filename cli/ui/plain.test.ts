// The Plain reporter's lines: a connection the pod answered because the local command was silent (always shown), and a
// gRPC call's service/method, grpc-status and duration.
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { PlainReporter } from './plain.js';

describe('PlainReporter', () => {
  it('says when the pod answered a connection the local command left unanswered, without --verbose', async () => {
    // Given a plain reporter that is not verbose
    const stderr = new PassThrough();
    let text = '';
    stderr.on('data', (d: Buffer) => {
      text += d.toString();
    });
    const reporter = new PlainReporter({ stderr, stdout: new PassThrough(), verbose: false });
    const conn = { type: 'connection', id: 'w', port: 8443, remote: '10.0.0.2:5000', pod: 'echo-1' } as const;
    // When a connection opens to the local command, falls back to the pod, and closes
    reporter.emit({ ...conn, to: 'local', state: 'open' });
    reporter.emit({ ...conn, to: 'pod', state: 'open', fallbackMs: 4000 });
    reporter.emit({ ...conn, to: 'pod', state: 'closed', bytesIn: 1, bytesOut: 2 });
    await reporter.close();
    // Then one line says so (plain connection lines stay behind --verbose)
    expect(text).toBe(
      'devop: connection 10.0.0.2:5000 → pod echo-1 :8443: the local command did not answer in 4.0 s, ' +
        'the pod answers\n',
    );
  });

  it('shows a gRPC call by its service/method and grpc-status, with grpc-message when it failed', async () => {
    // Given a plain reporter
    const stderr = new PassThrough();
    let text = '';
    stderr.on('data', (d: Buffer) => {
      text += d.toString();
    });
    const reporter = new PlainReporter({ stderr, stdout: new PassThrough(), verbose: false });
    const call = { type: 'request', port: 50051, method: 'POST', to: 'local' } as const;
    const grpc = { service: 'pkg.Echo', method: 'Unary' };
    // When one call succeeds, one fails and one is reset without a status
    for (const id of ['1', '2', '3']) reporter.emit({ ...call, id, path: '/pkg.Echo/Unary', grpc });
    reporter.emit({ type: 'response', id: '1', status: 200, ms: 12, bytes: 20, grpcStatus: 0, grpcMessage: 'OK' });
    reporter.emit({ type: 'response', id: '2', status: 200, ms: 3, bytes: 0, grpcStatus: 7, grpcMessage: 'no' });
    reporter.emit({ type: 'response', id: '3', status: 200, ms: 500, bytes: 0 });
    await reporter.close();
    // Then each line names the call, its status and duration
    expect(text.split('\n')).toEqual([
      'devop: OK (0) gRPC pkg.Echo/Unary → local :50051 (12 ms, 20 B)',
      'devop: PERMISSION_DENIED (7) gRPC pkg.Echo/Unary → local :50051 (3 ms, 0 B): no',
      'devop: no grpc-status gRPC pkg.Echo/Unary → local :50051 (500 ms, 0 B)',
      '',
    ]);
  });
});
