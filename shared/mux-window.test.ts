// Receive-window auto-tuning over a path with a real round trip (two loopback socket pairs joined by a delay line):
// a stream's window grows while the path, not its reader, limits it; a stalled reader's window does not grow and the
// peer never holds more than it; the connection's budget bounds the growth of many streams together.
import type net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  INITIAL_WINDOW,
  MAX_WINDOW,
  WINDOW_BUDGET,
  createAgentMux,
  createClientMux,
  type MuxOptions,
  type MuxStream,
} from './mux.js';
import { nextEvent, until } from '../testkit/protocol-fixtures.js';
import { socketPair } from '../testkit/sockets.js';

const MiB = 1024 * 1024;
/** Each way: a 20 ms round trip, a cluster in the same region. */
const DELAY_MS = 10;

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const fn of cleanups.splice(0)) fn();
});

/** Delivers what `from` reads to `to` `ms` later, in order (timers of one duration fire in the order they were set). */
function delay(from: net.Socket, to: net.Socket, ms: number): void {
  from.on('data', (chunk: Buffer) => {
    const timer = setTimeout(() => to.destroyed || to.write(chunk), ms);
    cleanups.push(() => clearTimeout(timer));
  });
}

/** A client and an agent mux whose connection crosses a delay line of DELAY_MS each way. */
async function delayedMuxPair(options: Omit<MuxOptions<'client'>, 'side'> = {}) {
  const [clientEnd, lineNear] = await socketPair(cleanups);
  const [lineFar, agentEnd] = await socketPair(cleanups);
  delay(lineNear, lineFar, DELAY_MS);
  delay(lineFar, lineNear, DELAY_MS);
  const client = createClientMux(clientEnd, options);
  const agent = createAgentMux(agentEnd, options);
  cleanups.push(() => {
    client.close('test done');
    agent.close('test done');
  });
  return { client, agent, clientEnd };
}

/** Writes `total` bytes with backpressure, then ends; `accepted` counts what write() took. */
function writeAll(stream: MuxStream, total: number): { accepted: () => number } {
  const chunk = Buffer.alloc(64 * 1024, 7);
  let accepted = 0;
  const pump = (): void => {
    while (accepted < total) {
      accepted += chunk.length;
      if (!stream.write(chunk)) {
        stream.once('drain', pump);
        return;
      }
    }
    stream.end();
  };
  pump();
  return { accepted: () => accepted };
}

function countAll(stream: MuxStream): Promise<number> {
  return new Promise((resolve, reject) => {
    let n = 0;
    stream.on('data', (d: Buffer) => (n += d.length));
    stream.on('end', () => resolve(n));
    stream.on('error', reject);
  });
}

describe('mux receive window', () => {
  it('grows while a 20 ms path, not the reader, limits the stream; gives the growth back at the end', async () => {
    // Given a connection across a 20 ms round trip and a reader that takes everything at once
    const { client, agent } = await delayedMuxPair();
    const incoming = nextEvent<MuxStream>(agent, 'stream');
    const stream = client.openStream({ kind: 'outgoing', host: 'far', port: 1 });
    const total = 32 * MiB;
    // When the client sends 32 MiB (128 windows of 256 KiB: 2.6 s at one window per round trip)
    const t0 = performance.now();
    writeAll(stream, total);
    const reader = await incoming;
    expect(await countAll(reader)).toBe(total);
    const ms = performance.now() - t0;
    // Then the receiving side's window grew well beyond the initial one, never beyond the maximum
    console.log(`32 MiB over a 20 ms RTT in ${ms.toFixed(0)} ms, window grew to ${reader.receiveWindow / MiB} MiB`);
    expect(reader.receiveWindow).toBeGreaterThanOrEqual(8 * INITIAL_WINDOW);
    expect(reader.receiveWindow).toBeLessThanOrEqual(MAX_WINDOW);
    // And the sending side, whose reader got nothing, kept its window
    expect(stream.receiveWindow).toBe(INITIAL_WINDOW);
    // And once both sides are done the growth is back in the connection's budget
    stream.on('data', () => undefined);
    reader.end();
    await until(() => agent.streamCount === 0, 'the stream to be released');
    expect(agent.windowBudgetLeft).toBe(WINDOW_BUDGET);
  }, 60_000);

  it('reaches 8 MiB within a few round trips of the first byte over a 20 ms path', async () => {
    // Given a connection across a 20 ms round trip whose round trip is already measured (as after a first stream)
    const { client, agent } = await delayedMuxPair();
    const warm = nextEvent<MuxStream>(agent, 'stream');
    writeAll(client.openStream({ kind: 'outgoing', host: 'warm', port: 1 }), 1 * MiB);
    await countAll(await warm);
    const incoming = nextEvent<MuxStream>(agent, 'stream');
    // When a stream sends 32 MiB to a reader that takes everything at once
    writeAll(client.openStream({ kind: 'outgoing', host: 'far', port: 1 }), 32 * MiB);
    const reader = await incoming;
    let received = 0;
    let firstAt = 0;
    let reached: { ms: number; received: number } | null = null;
    reader.on('data', (d: Buffer) => {
      if (received === 0) firstAt = performance.now();
      received += d.length;
      if (reached === null && reader.receiveWindow >= 8 * MiB) reached = { ms: performance.now() - firstAt, received };
    });
    await new Promise((resolve) => reader.on('end', resolve));
    // Then the window reached 8 MiB after at most 3 round trips' worth of a window that grows fourfold (0.25 + 1 + 4
    // MiB; doubling needs ~9 MiB) and within a few round trips
    expect(reached).not.toBeNull();
    const { ms, received: at } = reached as unknown as { ms: number; received: number };
    const roundTrips = ms / (2 * DELAY_MS);
    console.log(
      `window reached 8 MiB ${ms.toFixed(0)} ms (${roundTrips.toFixed(1)} RTT) after the first byte, ` +
        `${(at / MiB).toFixed(2)} MiB in`,
    );
    expect(at).toBeLessThan(6 * MiB);
    expect(Number.isInteger(reader.receiveWindow)).toBe(true);
    expect(roundTrips).toBeLessThan(8);
  }, 60_000);

  it('never grows the window of a reader slower than the path, steady or in bursts', async () => {
    // Given a connection across the 20 ms path whose round trip is measured, and two streams that send 64 MiB each
    const { client, agent } = await delayedMuxPair();
    const warm = nextEvent<MuxStream>(agent, 'stream');
    writeAll(client.openStream({ kind: 'outgoing', host: 'warm', port: 1 }), 1 * MiB);
    await countAll(await warm);
    const readers: MuxStream[] = [];
    agent.on('stream', (s: MuxStream) => readers.push(s));
    for (const host of ['steady', 'bursts']) writeAll(client.openStream({ kind: 'outgoing', host, port: 1 }), 64 * MiB);
    await until(() => readers.length === 2, 'both streams to open');
    const [steady, bursts] = readers;
    // When one reader takes 32 KiB every 10 ms (3.2 MiB/s: a quarter of what its window carries per round trip) and
    // the other takes everything it holds every 200 ms, 16 KiB per tick (a window per 10 round trips, in a burst)
    const steadyTimer = setInterval(() => steady.read(Math.min(32 * 1024, steady.readableLength)), 10);
    const drain = (): void => {
      if (bursts.read(Math.min(16 * 1024, bursts.readableLength)) !== null) setImmediate(drain);
    };
    const burstTimer = setInterval(drain, 200);
    cleanups.push(
      () => clearInterval(steadyTimer),
      () => clearInterval(burstTimer),
    );
    await new Promise((r) => setTimeout(r, 1500));
    clearInterval(steadyTimer);
    clearInterval(burstTimer);
    // Then neither window grew, and neither side holds more than one
    console.log(`slow readers after 1.5 s: windows ${steady.receiveWindow} B and ${bursts.receiveWindow} B`);
    expect(steady.receiveWindow).toBe(INITIAL_WINDOW);
    expect(bursts.receiveWindow).toBe(INITIAL_WINDOW);
    expect(steady.readableLength).toBeLessThanOrEqual(INITIAL_WINDOW);
    expect(bursts.readableLength).toBeLessThanOrEqual(INITIAL_WINDOW);
  }, 60_000);

  it('stops growing when the reader stalls: the peer never holds more than the window', async () => {
    // Given a stream over the 20 ms path whose reader first takes 16 MiB at full speed (so its window grows)
    const { client, agent, clientEnd } = await delayedMuxPair();
    const incoming = nextEvent<MuxStream>(agent, 'stream');
    const stream = client.openStream({ kind: 'outgoing', host: 'far', port: 1 });
    const total = 64 * MiB;
    const writer = writeAll(stream, total);
    const reader = await incoming;
    let consumed = 0;
    const onData = (d: Buffer): void => {
      consumed += d.length;
      if (consumed >= 16 * MiB) reader.pause();
    };
    reader.on('data', onData);
    await until(() => reader.isPaused(), 'the reader to take 16 MiB');
    // When the reader stops reading and the writer keeps writing
    const window = reader.receiveWindow;
    expect(window).toBeGreaterThan(INITIAL_WINDOW);
    let worst = 0;
    let stable = 0;
    let last = -1;
    while (stable < 20) {
      await new Promise((r) => setTimeout(r, 2 * DELAY_MS));
      // Everything the sender wrote and the reader has not taken: in the sender's buffers, on the path, or held here
      const unconsumed = writer.accepted() - consumed;
      const senderHolds = stream.writableLength + clientEnd.writableLength;
      worst = Math.max(worst, senderHolds, reader.readableLength);
      stable = unconsumed === last ? stable + 1 : 0;
      last = unconsumed;
    }
    // Then the window did not grow, the receiver holds one window (less what was consumed since the last CREDIT: under
    // a quarter), and the sender never held more than one
    console.log(`stalled reader: window ${window / MiB} MiB, holds ${reader.readableLength} B, worst ${worst} B`);
    expect(reader.receiveWindow).toBe(window);
    expect(reader.readableLength).toBeLessThanOrEqual(window);
    expect(reader.readableLength).toBeGreaterThan((window * 3) / 4);
    expect(worst).toBeLessThanOrEqual(window);
    expect(writer.accepted()).toBeLessThan(total);
    // And when the reader resumes, the rest arrives
    reader.off('data', onData);
    const rest = countAll(reader);
    reader.resume();
    expect(consumed + (await rest)).toBe(total);
  }, 60_000);

  it('keeps the growth of many streams within the connection budget', async () => {
    // Given a connection across the 20 ms path with a budget of 4 MiB of growth
    const budget = 4 * MiB;
    const { client, agent } = await delayedMuxPair({ windowBudget: budget });
    const readers: MuxStream[] = [];
    const counts: Array<Promise<number>> = [];
    agent.on('stream', (s: MuxStream) => {
      readers.push(s);
      counts.push(countAll(s));
    });
    // When 16 streams send 8 MiB each at once
    const open = (i: number): MuxStream => client.openStream({ kind: 'outgoing', host: `s${i}`, port: 1 });
    const streams = Array.from({ length: 16 }, (_, i) => open(i));
    for (const s of streams) writeAll(s, 8 * MiB);
    let mostGrown = 0;
    const sample = setInterval(() => {
      const grown = readers.reduce((sum, r) => sum + r.receiveWindow - INITIAL_WINDOW, 0);
      mostGrown = Math.max(mostGrown, grown);
    }, 1);
    cleanups.push(() => clearInterval(sample));
    await until(() => counts.length === 16, 'all streams to open');
    // Then every byte arrives, and the windows together never grew by more than the budget (but did grow)
    expect(await Promise.all(counts)).toEqual(Array.from({ length: 16 }, () => 8 * MiB));
    clearInterval(sample);
    console.log(`16 streams: windows grew by at most ${mostGrown / MiB} MiB together (budget ${budget / MiB} MiB)`);
    expect(mostGrown).toBeGreaterThan(0);
    expect(mostGrown).toBeLessThanOrEqual(budget);
    // And every window is a whole number of bytes (it is granted as a 32-bit CREDIT)
    expect(readers.map((r) => r.receiveWindow).filter((w) => !Number.isInteger(w))).toEqual([]);
    expect(agent.windowBudgetLeft).toBeGreaterThanOrEqual(0);
  }, 60_000);
});
