// The Plain reporter's line for a connection the pod answered because the local command was silent: always shown.
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
});
