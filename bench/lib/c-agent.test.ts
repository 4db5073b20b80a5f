// bench/lib/c-agent.c speaks devop's wire protocol to devop's own mux: bench:steal's c-agent path is only worth reading
// if the C side passes the CLI's checks (every frame and message it sends is parsed by shared/mux.ts as from an agent)
// and carries every byte of a stolen connection both ways, beyond the initial window, with the half-closes.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hasCc } from './has-cc.js';
import { clientHello } from '../../shared/handshake.js';
import { createClientMux, type MuxStream } from '../../shared/mux.js';
import { FEATURES, type AgentMessage, type TrafficEvent } from '../../shared/protocol.js';

const MiB = 1024 * 1024;
/** Both more than the 256 KiB a stream starts with: the C side must wait for credit and grant it. */
const UPLOAD = 3 * MiB + 4321;
const ANSWER = 2 * MiB + 99;

const sha = (data: Buffer): string => createHash('sha256').update(data).digest('hex');

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

function collect(source: NodeJS.ReadableStream): Promise<Buffer> {
  const got: Buffer[] = [];
  source.on('data', (d: Buffer) => got.push(d));
  return new Promise((resolve, reject) => {
    source.once('end', () => resolve(Buffer.concat(got)));
    source.once('error', reject);
  });
}

describe.skipIf(!hasCc)(`c-agent.c${hasCc ? '' : ' (skipped: no cc to build it)'}`, () => {
  const dir = mkdtempSync(join(tmpdir(), 'devop-c-agent-'));
  const binary = join(dir, 'c-agent');
  const children: ChildProcess[] = [];

  /** A C agent side of its own (it serves one tunnel): its client and tunnel ports once it listens. */
  const startAgent = async (): Promise<{ clientPort: number; tunnelPort: number }> => {
    const [clientPort, tunnelPort] = [await freePort(), await freePort()];
    const child = spawn(binary, [String(clientPort), String(tunnelPort)], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(child);
    await new Promise<void>((resolve, reject) => {
      child.stdout?.once('data', () => resolve());
      child.once('exit', (code) => reject(new Error(`c-agent exited with ${code}`)));
    });
    return { clientPort, tunnelPort };
  };

  beforeAll(() => {
    execFileSync('cc', ['-O2', '-o', binary, resolve(import.meta.dirname, 'c-agent.c')]);
  });

  afterAll(() => {
    for (const child of children) child.kill();
    rmSync(dir, { recursive: true, force: true });
  });

  it.each([
    ['sends the connection events itself', [FEATURES.traffic]],
    ['leaves them to the stream (stream-events)', [FEATURES.traffic, FEATURES.streamEvents]],
  ])('carries a stolen connection both ways past the initial window and %s', async (_, features) => {
    // Given devop's client mux on the C side's tunnel, past hello and subscribe
    const { clientPort, tunnelPort } = await startAgent();
    const mux = createClientMux(net.connect({ port: tunnelPort, host: '127.0.0.1' }));
    const messages: AgentMessage[] = [];
    mux.on('message', (msg: AgentMessage) => messages.push(msg));
    const ok = await clientHello(mux, {
      token: 'any',
      client: { user: 'test', host: 'test', pid: process.pid, devopVersion: '0' },
      features,
    });
    expect(ok.features).toContain(FEATURES.steal);
    mux.send({ type: 'subscribe', id: 'sub-1', port: clientPort, mode: 'steal', flush: false, stealProbes: false });
    await expect.poll(() => messages.find((m) => m.type === 'subscribed')).toMatchObject({ id: 'sub-1' });
    const streams: MuxStream[] = [];
    mux.on('stream', (stream: MuxStream) => streams.push(stream));

    // When a client connects, sends more than a window and half-closes, and the CLI side answers the same way
    const upload = randomBytes(UPLOAD);
    const answer = randomBytes(ANSWER);
    const client = net.connect({ port: clientPort, host: '127.0.0.1', allowHalfOpen: true });
    const clientGot = collect(client);
    client.end(upload);
    await expect.poll(() => streams.length).toBe(1);
    const [stream] = streams;
    const closed = new Promise<void>((resolve) => stream.once('close', resolve));
    const streamGot = await collect(stream);
    stream.end(answer);
    const got = await clientGot;
    client.end();

    // Then each side got every byte of the other's, the stream said where it came from, and the events (if the
    // agent sends them) counted them
    expect(stream.open).toMatchObject({
      kind: 'incoming',
      port: clientPort,
      mode: 'steal',
      remoteAddress: '127.0.0.1',
    });
    expect(sha(streamGot), 'what reached the CLI side').toBe(sha(upload));
    expect(sha(got), 'what reached the client').toBe(sha(answer));
    await closed;
    const events = (): TrafficEvent[] => messages.flatMap((m) => (m.type === 'traffic' ? [m.event] : []));
    if (features.includes(FEATURES.streamEvents)) {
      expect(stream.open).toMatchObject({ connId: `${clientPort}-1` });
      expect([stream.bytesReceived, stream.bytesSent], 'what the stream counted').toEqual([UPLOAD, ANSWER]);
      // A close event would follow the END: give it the time of a round trip to come, and see none did.
      mux.send({ type: 'ping', id: 1, sentAt: Date.now() });
      await new Promise((r) => setTimeout(r, 200));
      expect(events()).toEqual([]);
    } else {
      expect(stream.open).not.toHaveProperty('connId');
      await expect.poll(() => events().length).toBe(2);
      expect(events()).toMatchObject([
        { kind: 'connection', phase: 'open', port: clientPort, to: 'local' },
        { kind: 'connection', phase: 'close', bytesIn: UPLOAD, bytesOut: ANSWER },
      ]);
    }
    mux.close('test over');
  });
});
