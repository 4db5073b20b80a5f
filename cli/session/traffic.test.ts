// The agent's traffic events as the reporter gets them: two pods' requests with the same agent id stay apart.
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import type { TrafficEvent } from '../../shared/protocol.js';
import type { ReportEvent } from '../reporter.js';
import { PlainReporter } from '../ui/plain.js';
import { applyEvent, initialViewState } from '../ui/state.js';
import { trafficToEvent } from './traffic.js';

describe('trafficToEvent', () => {
  it('Given two pods whose agents both number a request 8080-1, Then each answer is paired with its own request', async () => {
    // Given a plain reporter (it pairs a response with its request by id)
    const stderr = new PassThrough();
    let text = '';
    stderr.on('data', (d: Buffer) => {
      text += d.toString();
    });
    const reporter = new PlainReporter({ stderr, stdout: new PassThrough(), verbose: false });
    const request = (path: string): TrafficEvent =>
      ({ kind: 'request', requestId: '8080-1', port: 8080, method: 'GET', path, to: 'local' }) as TrafficEvent;
    const response = (status: number): TrafficEvent =>
      ({ kind: 'response', requestId: '8080-1', status, durationMs: 3, bytes: 2 }) as TrafficEvent;
    const emit = (event: TrafficEvent, pod: string): void => reporter.emit(trafficToEvent(event, pod) as ReportEvent);
    // When both pods' requests arrive before either answer (--all-pods)
    emit(request('/from-a'), 'echo-a');
    emit(request('/from-b'), 'echo-b');
    emit(response(201), 'echo-a');
    emit(response(202), 'echo-b');
    await reporter.close();
    // Then each answer line names its own request
    const lines = text.trimEnd().split('\n');
    expect(lines.find((l) => l.includes('201'))).toContain('GET /from-a');
    expect(lines.find((l) => l.includes('202'))).toContain('GET /from-b');
  });
});

describe('a request a filter could not decide', () => {
  it('Given a request event with a note, Then the plain line says why the pod answered', async () => {
    const stderr = new PassThrough();
    let text = '';
    stderr.on('data', (d: Buffer) => {
      text += d.toString();
    });
    const reporter = new PlainReporter({ stderr, stdout: new PassThrough(), verbose: false });
    const note = 'body over 64 KiB: the body filter cannot read it, the pod answers';
    const request = { kind: 'request', requestId: '80-1', port: 80, method: 'POST', path: '/big', to: 'pod', note };
    reporter.emit(trafficToEvent(request as TrafficEvent, 'echo-a') as ReportEvent);
    const response = { kind: 'response', requestId: '80-1', status: 200, durationMs: 4, bytes: 2 };
    reporter.emit(trafficToEvent(response as TrafficEvent, 'echo-a') as ReportEvent);
    await reporter.close();
    expect(text).toContain(`POST /big → pod :80 (4 ms, 2 B): ${note}`);
  });
});

describe("a filtered mirror's requests", () => {
  it('Given mirror request events, matched and not, Then plain prints each as it comes and the TUI row is done', async () => {
    // Given a plain reporter
    const stderr = new PassThrough();
    let text = '';
    stderr.on('data', (d: Buffer) => {
      text += d.toString();
    });
    const reporter = new PlainReporter({ stderr, stdout: new PassThrough(), verbose: false });
    const mirrored = (requestId: string, path: string, to: 'local' | 'pod', note?: string): TrafficEvent => ({
      kind: 'request',
      requestId,
      port: 3000,
      method: 'GET',
      path,
      to,
      mirror: true,
      at: 0,
      ...(note ? { note } : {}),
    });
    // When the agent tells of a copied request, of one the filter did not match, and of one it could not read (no
    // response follows any)
    const events = [
      mirrored('3000-m1-r1', '/a', 'local'),
      mirrored('3000-m1-r2', '/b', 'pod'),
      mirrored('3000-m1-r3', '/c', 'pod', 'body over 64 KiB: the body filter cannot read it'),
    ].map((e) => trafficToEvent(e, undefined) as ReportEvent);
    for (const event of events) reporter.emit(event);
    await reporter.close();
    // Then each has its line at once, saying whether a copy went to the local command
    expect(text).toBe(
      'devop: mirror GET /a :3000: copied to the local command\n' +
        'devop: mirror GET /b :3000: not matched, not copied\n' +
        'devop: mirror GET /c :3000: not copied: body over 64 KiB: the body filter cannot read it\n',
    );
    // And the TUI's rows are done (nothing will answer them) and marked as mirrored
    let state = initialViewState(0);
    for (const event of events) state = applyEvent(state, event, 0);
    expect(state.rows.map((r) => [r.path, r.to, r.mirror, r.done])).toEqual([
      ['/a', 'local', true, true],
      ['/b', 'pod', true, true],
      ['/c', 'pod', true, true],
    ]);
  });
});
