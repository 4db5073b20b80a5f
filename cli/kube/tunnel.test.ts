// The tunnel against the stand-in's HTTPS/WebSocket API server: several ports of a pod over one pods/portforward
// WebSocket, each its own byte stream that fails and ends on its own. The "pod" is local: one port echoes, one flips
// every bit, the others refuse. A TCP relay in front of the API server counts the WebSockets the tunnel opens.
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { connect, createServer, type Server, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { localRuntime } from '../../standin/local-runtime.js';
import { UserError } from '../../shared/errors.js';
import { openPortForward, openPortForwards, PortForwardError } from './tunnel.js';
import { waitFor } from '../../testkit/wait.js';

const ECHO_PORT = 7000;
const FLIP_PORT = 7001;
const REFUSED_PORT = 7009;
/** How long a round trip over loopback may take on a loaded machine before the test reports what arrived. */
const ROUND_TRIP_MS = 10_000;

let cluster: ClusterHandle;
let kc: KubeConfig;
const servers: Server[] = [];
const local = new Map<number, number>();
/** The sizes of the messages the API server unwrapped onto each connection to a pod, in the order they were dialled. */
const unwrapped: number[][] = [];
/** The client side of each connection through the relay, in the order they were made. */
const relayed: Socket[] = [];

async function listen(onSocket: (s: Socket) => void): Promise<number> {
  const server = createServer(onSocket);
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return (server.address() as { port: number }).port;
}

const flip = (data: Buffer): Buffer => Buffer.from(data.map((b) => b ^ 0xff));
const sha = (data: Buffer): string => createHash('sha256').update(data).digest('hex');

/** Writes `sent` to the stream and resolves with the first `expected` bytes that come back. */
function roundTrip(stream: Duplex, sent: Buffer, expected = sent.length): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let got = 0;
  const back = new Promise<Buffer>((resolve, reject) => {
    const timer = setTimeout(() => finish(new Error(`${got} of ${expected} bytes back in time`)), ROUND_TRIP_MS);
    const onData = (chunk: Buffer) => {
      chunks.push(chunk);
      got += chunk.length;
      if (got >= expected) finish();
    };
    const onClose = () => finish(new Error(`the stream closed after ${got} of ${expected} bytes`));
    const finish = (err?: Error) => {
      clearTimeout(timer);
      stream.off('data', onData).off('error', finish).off('close', onClose);
      if (err) reject(err);
      else resolve(Buffer.concat(chunks));
    };
    stream.on('data', onData).on('error', finish).on('close', onClose);
  });
  stream.write(sent);
  return back;
}

/** The one connection made through the relay since it had `from`: the WebSocket of the tunnel opened since. */
function webSocketSince(from: number): Socket {
  expect(relayed.length - from).toBe(1);
  return relayed[from];
}

/** Checks that both servers answer over their streams, with different bytes at the same time. */
async function expectBothCarry(echo: Duplex, flipped: Duplex): Promise<void> {
  const a = randomBytes(256 * 1024);
  const b = randomBytes(256 * 1024);
  const [fromEcho, fromFlip] = await Promise.all([roundTrip(echo, a), roundTrip(flipped, b)]);
  expect(sha(fromEcho)).toBe(sha(a));
  expect(sha(fromFlip)).toBe(sha(flip(b)));
}

beforeAll(async () => {
  local.set(ECHO_PORT, await listen((s) => s.pipe(s)));
  local.set(FLIP_PORT, await listen((s) => s.on('data', (d: Buffer) => s.write(flip(d)))));
  cluster = await startCluster({ kubelet: false });
  const runtime = localRuntime((port) => local.get(port));
  cluster.controlPlane.attachNode({
    ...runtime,
    async dialPod(namespace, pod, port) {
      const socket = await runtime.dialPod(namespace, pod, port);
      // The API server writes each message it unwraps to the pod's connection as it is: one write per message.
      const sizes: number[] = [];
      unwrapped.push(sizes);
      const write = socket.write.bind(socket) as (chunk: Buffer, ...rest: unknown[]) => boolean;
      socket.write = ((chunk: Buffer, ...rest: unknown[]) => {
        sizes.push(chunk.length);
        return write(chunk, ...rest);
      }) as typeof socket.write;
      return socket;
    },
  });
  const admin = new KubeConfig();
  admin.loadFromFile(cluster.kubeconfigPath);
  await admin.makeApiClient(CoreV1Api).createNamespacedPod({
    namespace: 'default',
    body: { metadata: { name: 'box' }, spec: { containers: [{ name: 'main', image: 'busybox' }] } },
  });
  const api = new URL(cluster.server);
  const relayPort = await listen((client) => {
    relayed.push(client);
    const upstream = connect(Number(api.port), api.hostname);
    client.pipe(upstream).pipe(client);
    // A terminated WebSocket ends with a reset: the relay only closes the other side.
    client.on('error', () => upstream.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('error', () => client.destroy()).on('close', () => client.destroy());
  });
  kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: admin.clusters.map((c) => ({ ...c, server: `https://127.0.0.1:${relayPort}` })),
    users: admin.users,
    contexts: admin.contexts,
    currentContext: admin.currentContext,
  });
});

afterAll(async () => {
  await cluster?.stop();
  for (const server of servers) server.close();
});

describe('a tunnel to several ports of a pod', () => {
  it('carries each port both ways, independently, over one WebSocket', async () => {
    const from = relayed.length;
    const [echo, flipped] = await openPortForwards(kc, {
      namespace: 'default',
      pod: 'box',
      ports: [ECHO_PORT, FLIP_PORT],
    });

    await expectBothCarry(echo, flipped);
    await expectBothCarry(echo, flipped);

    webSocketSince(from);
    echo.destroy();
    flipped.destroy();
  });

  it('fails only the stream of a port nothing listens on; the other ports keep carrying data', async () => {
    const from = relayed.length;
    const [echo, refused, flipped] = await openPortForwards(kc, {
      namespace: 'default',
      pod: 'box',
      ports: [ECHO_PORT, REFUSED_PORT, FLIP_PORT],
    });

    const [error] = await once(refused, 'error');

    expect(error).toBeInstanceOf(PortForwardError);
    expect((error as Error).message).toMatch(
      /^error forwarding port 7009 to pod box, uid [0-9a-f-]+: connect ECONNREFUSED 127\.0\.0\.1:7009$/,
    );
    await expectBothCarry(echo, flipped);
    expect(echo.destroyed || flipped.destroyed).toBe(false);
    expect(webSocketSince(from).destroyed).toBe(false);
    echo.destroy();
    flipped.destroy();
  });

  it('keeps the WebSocket while any stream is open, and closes it when the last one is done', async () => {
    const from = relayed.length;
    const [destroyed, ended, echo] = await openPortForwards(kc, {
      namespace: 'default',
      pod: 'box',
      ports: [FLIP_PORT, FLIP_PORT, ECHO_PORT],
    });
    expect(await roundTrip(destroyed, Buffer.from('one'))).toEqual(flip(Buffer.from('one')));
    expect(await roundTrip(ended, Buffer.from('two'))).toEqual(flip(Buffer.from('two')));

    destroyed.destroy();
    ended.end();
    await once(ended, 'finish');

    const sent = randomBytes(64 * 1024);
    expect(sha(await roundTrip(echo, sent))).toBe(sha(sent));
    const webSocket = webSocketSince(from);
    expect(webSocket.destroyed).toBe(false);

    const endedCloses = once(ended, 'close');
    echo.destroy();
    await endedCloses;
    await waitFor('the WebSocket to close', () => webSocket.destroyed, ROUND_TRIP_MS);
  });

  it('closes every stream when the WebSocket is cut', async () => {
    const streams = await openPortForwards(kc, { namespace: 'default', pod: 'box', ports: [ECHO_PORT, FLIP_PORT] });
    await roundTrip(streams[0], Buffer.from('up'));

    const closed = streams.map((s) => once(s, 'close'));
    cluster.dropWebSockets();

    await Promise.all(closed);
    expect(streams.every((s) => s.destroyed)).toBe(true);
  });
});

describe('a tunnel to one port', () => {
  it('carries bytes exactly and closes the WebSocket when the stream ends', async () => {
    const from = relayed.length;
    const stream = await openPortForward(kc, { namespace: 'default', pod: 'box', port: ECHO_PORT });
    const sent = randomBytes(4 * 1024 * 1024);

    expect(sha(await roundTrip(stream, sent))).toBe(sha(sent));

    const closed = once(stream, 'close');
    stream.end();
    await closed;
    const webSocket = webSocketSince(from);
    await waitFor('the WebSocket to close', () => webSocket.destroyed, ROUND_TRIP_MS);
  });

  it('gathers corked writes into messages of at most 1 MiB (a larger write alone) and carries them exactly', async () => {
    const dialled = unwrapped.length;
    const stream = await openPortForward(kc, { namespace: 'default', pod: 'box', port: ECHO_PORT });
    // Below, at and above the sizes the tunnel treats apart: a message from Node's pool (< 16 KiB), from the process's
    // pool (16 KiB to 2 MiB, given back once written), cut at 1 MiB when gathered, and a buffer of its own (> 2 MiB).
    const sizes = [
      1,
      100,
      5000,
      16_383,
      16_384,
      70_000,
      1024 * 1024 - 1,
      1024 * 1024,
      1024 * 1024 + 5,
      3 * 1024 * 1024,
    ];
    for (let round = 0; round < 3; round++) {
      const parts = sizes.map((size) => randomBytes(size));
      const sent = Buffer.concat(parts);
      stream.cork();
      const back = roundTrip(stream, parts[0], sent.length);
      for (const part of parts.slice(1)) stream.write(part);
      stream.uncork();

      expect(sha(await back)).toBe(sha(sent));
    }
    // Each round: the small parts together, then each part of 1 MiB or more on its own (two never fit in one).
    const round = [107_868, 1024 * 1024 - 1, 1024 * 1024, 1024 * 1024 + 5, 3 * 1024 * 1024];
    expect(unwrapped.slice(dialled)).toEqual([[...round, ...round, ...round]]);
    stream.destroy();
  });

  it('fails the stream with a PortForwardError when nothing listens, and lets the WebSocket go', async () => {
    const from = relayed.length;
    const stream = await openPortForward(kc, { namespace: 'default', pod: 'box', port: REFUSED_PORT });

    const [error] = await once(stream, 'error');

    expect(error).toBeInstanceOf(PortForwardError);
    expect((error as Error).message).toContain('ECONNREFUSED');
    const webSocket = webSocketSince(from);
    await waitFor('the WebSocket to close', () => webSocket.destroyed, ROUND_TRIP_MS);
  });

  it('reports an upgrade the API server refuses (RBAC) as forbidden, naming the permission', async () => {
    const restricted = new KubeConfig();
    restricted.loadFromFile(cluster.restrictedKubeconfigPath);
    const opening = openPortForward(restricted, { namespace: 'default', pod: 'box', port: ECHO_PORT });
    await expect(opening).rejects.toBeInstanceOf(UserError);
    await expect(opening).rejects.toThrow(
      'forbidden: cannot create pods/portforward in namespace "default" ' +
        '(needed to open a port-forward to pod box:7000)',
    );
  });
});
