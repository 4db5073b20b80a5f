// Sockets with their own read buffers, over real loopback connections: the buffer grows to 1 MiB under bulk data, is
// read into again only when released (kept chunks stay intact, lent ones stop the reads), goes to the next connection
// when its own closes, and an accepted connection taken over from a server reads the same way.
import { createHash, randomBytes } from 'node:crypto';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { adoptOwnReads, connectOwnReads, MAX_BUFFER, MIN_BUFFER, ownReads, type Taken } from './own-reads.js';
import { nextEvent, until } from '../testkit/protocol-fixtures.js';

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const fn of cleanups.splice(0)) fn();
});

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/** A listening server (its connections handed to `onConnection`), closed after the test. */
async function listen(options: net.ServerOpts, onConnection: (socket: net.Socket) => void): Promise<number> {
  const server = net.createServer(options, onConnection);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => server.close());
  return (server.address() as net.AddressInfo).port;
}

/** A connection whose client end reads into its own buffers; the server end sends `data`, then ends. */
async function ownReadsFrom(data: Buffer): Promise<net.Socket> {
  const port = await listen({}, (sender) => {
    cleanups.push(() => sender.destroy());
    sender.end(data);
  });
  const socket = connectOwnReads({ port, host: '127.0.0.1' });
  cleanups.push(() => socket.destroy());
  await nextEvent(socket, 'connect');
  return socket;
}

/** Starts the socket's own reads with `take`; resolves at the end of the data. */
function readAll(socket: net.Socket, take: (chunk: Buffer) => Taken): Promise<void> {
  const ended = nextEvent(socket, 'end');
  const reads = ownReads(socket);
  if (!reads) throw new Error('the socket has no own reads');
  reads.start(take);
  return ended.then(() => undefined);
}

describe('own reads', () => {
  it('grow the buffer from 16 KiB to 1 MiB while reads fill it, reusing it from one read to the next', async () => {
    // Given 24 MiB waiting in the kernel for a socket with its own reads (it reads nothing before start())
    const data = randomBytes(24 * 1024 * 1024);
    const socket = await ownReadsFrom(data);
    await new Promise((r) => setTimeout(r, 50));
    expect(socket.bytesRead).toBe(0);
    // When it reads everything, copying each chunk and releasing the buffer
    const sizes: number[] = [];
    const buffers = new Set<ArrayBufferLike>();
    const parts: Buffer[] = [];
    await readAll(socket, (chunk) => {
      sizes.push(chunk.length);
      buffers.add(chunk.buffer);
      parts.push(Buffer.from(chunk));
      return 'released';
    });
    // Then the bytes are intact, the first read is at most 16 KiB, later ones reach 1 MiB, and a few buffers served
    // every read (one per size, plus one after each small read)
    expect(sha(Buffer.concat(parts))).toBe(sha(data));
    expect(sizes[0]).toBeLessThanOrEqual(MIN_BUFFER);
    expect(Math.max(...sizes)).toBe(MAX_BUFFER);
    expect(buffers.size).toBeLessThan(sizes.length);
  });

  it('read into a released buffer again, and never into a kept one', async () => {
    // Given two sockets each with 8 MiB to read
    const data = randomBytes(8 * 1024 * 1024);
    const [released, kept] = await Promise.all([ownReadsFrom(data), ownReadsFrom(data)]);
    // When one reader keeps views of released buffers (a misuse) and the other keeps views it said it kept
    const releasedViews: Buffer[] = [];
    const keptViews: Buffer[] = [];
    await Promise.all([
      readAll(released, (chunk) => {
        releasedViews.push(chunk);
        return 'released';
      }),
      readAll(kept, (chunk) => {
        keptViews.push(chunk);
        return 'kept';
      }),
    ]);
    // Then the kept views still hold the bytes as sent, and the released ones were overwritten by later reads (the
    // buffer is reused: no new one per read)
    expect(sha(Buffer.concat(keptViews))).toBe(sha(data));
    expect(sha(Buffer.concat(releasedViews))).not.toBe(sha(data));
  });

  it('stop reading while a chunk is lent, and go on into the same buffer once released', async () => {
    // Given a socket with 4 MiB to read whose reader lends every chunk and returns it 20 ms later
    const data = randomBytes(4 * 1024 * 1024);
    const socket = await ownReadsFrom(data);
    const parts: Buffer[] = [];
    let readWhileLent = 0;
    let intactWhileLent = true;
    const done = readAll(socket, (chunk) => {
      const copy = Buffer.from(chunk);
      const readBefore = socket.bytesRead;
      setTimeout(() => {
        // While lent, the socket read nothing and the chunk was not overwritten
        readWhileLent += socket.bytesRead - readBefore;
        intactWhileLent &&= chunk.equals(copy);
        parts.push(copy);
        ownReads(socket)?.release();
      }, 20);
      return 'lent';
    });
    // When everything was read
    await done;
    await until(() => Buffer.concat(parts).length === data.length, 'the last lent chunk to come back');
    // Then the bytes are intact and nothing was read while a chunk was out
    expect(readWhileLent).toBe(0);
    expect(intactWhileLent).toBe(true);
    expect(sha(Buffer.concat(parts))).toBe(sha(data));
  });

  it("give a closed connection's buffers to the next ones, never one a reader kept", async () => {
    // Given a connection that read 8 MiB releasing its buffers, and closed
    const data = randomBytes(8 * 1024 * 1024);
    const seen = async (take: (chunk: Buffer) => Taken): Promise<Set<ArrayBufferLike>> => {
      const socket = await ownReadsFrom(data);
      const buffers = new Set<ArrayBufferLike>();
      await readAll(socket, (chunk) => {
        buffers.add(chunk.buffer);
        return take(chunk);
      });
      socket.destroy();
      await nextEvent(socket, 'close');
      return buffers;
    };
    const released = await seen(() => 'released');
    // When another connection reads 8 MiB
    const next = await seen(() => 'released');
    // Then it read into buffers the first one left
    expect([...next].some((b) => released.has(b))).toBe(true);
    // And given a connection that kept every chunk and closed, the next one reads into none of those, whose bytes
    // are still as sent
    const keptViews: Buffer[] = [];
    const kept = await seen((chunk) => {
      keptViews.push(chunk);
      return 'kept';
    });
    const after = await seen(() => 'released');
    expect([...after].some((b) => kept.has(b))).toBe(false);
    expect(sha(Buffer.concat(keptViews))).toBe(sha(data));
  });

  it('give lent buffers to the next connections once released, never before', async () => {
    // Given a connection that lends every chunk and releases it a turn later, its buffers growing to 1 MiB meanwhile
    const data = randomBytes(8 * 1024 * 1024);
    const lendAll = async (): Promise<ArrayBufferLike[]> => {
      const socket = await ownReadsFrom(data);
      const buffers: ArrayBufferLike[] = [];
      await readAll(socket, (chunk) => {
        if (!buffers.includes(chunk.buffer)) buffers.push(chunk.buffer);
        setImmediate(() => ownReads(socket)?.release());
        return 'lent';
      });
      socket.destroy();
      await nextEvent(socket, 'close');
      return buffers;
    };
    const lent = await lendAll();
    expect(lent.map((b) => b.byteLength)).toEqual([MIN_BUFFER, 4 * MIN_BUFFER, 16 * MIN_BUFFER, MAX_BUFFER]);
    // When the next connection reads
    const next = await lendAll();
    // Then it reads into the buffers the first one grew out of, not only into the last one
    expect(next[0]).toBe(lent[0]);
    // And given a connection that closes while its reader still holds a chunk
    const held = await ownReadsFrom(Buffer.from('held'));
    let heldChunk: Buffer | undefined;
    ownReads(held)?.start((chunk) => {
      heldChunk = chunk;
      return 'lent';
    });
    await until(() => heldChunk !== undefined, 'the held chunk');
    held.destroy();
    await nextEvent(held, 'close');
    // When another connection reads meanwhile, the held bytes stay as read, in a buffer the other does not read into
    const meanwhile = await lendAll();
    expect(meanwhile).not.toContain(heldChunk?.buffer);
    expect(heldChunk?.toString()).toBe('held');
    // And once the reader releases it, the next connection reads into it
    ownReads(held)?.release();
    const after = await lendAll();
    expect(after[0]).toBe(heldChunk?.buffer);
  });

  it('take over a connection accepted with pauseOnConnect: it reads its own way, writes and half-closes', async () => {
    // Given a server that pauses its connections, and adopts each with its own reads
    const adopted: net.Socket[] = [];
    const port = await listen({ pauseOnConnect: true, allowHalfOpen: true }, (accepted) => {
      const socket = adoptOwnReads(accepted, { allowHalfOpen: true });
      adopted.push(socket);
      cleanups.push(() => socket.destroy());
      const parts: Buffer[] = [];
      socket.on('end', () => socket.end(createHash('sha256').update(Buffer.concat(parts)).digest()));
      ownReads(socket)?.start((chunk) => {
        parts.push(Buffer.from(chunk));
        return 'released';
      });
    });
    // When a client sends 16 MiB and half-closes
    const data = randomBytes(16 * 1024 * 1024);
    const client = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    cleanups.push(() => client.destroy());
    const answer: Buffer[] = [];
    client.on('data', (d: Buffer) => answer.push(d));
    const ended = nextEvent(client, 'end');
    client.end(data);
    await ended;
    // Then the adopted socket had its own reads, read every byte, and its answer came back after the half-close
    expect(adopted).toHaveLength(1);
    expect(ownReads(adopted[0])).toBeDefined();
    expect(Buffer.concat(answer).toString('hex')).toBe(sha(data));
  });

  it('return to a 16 KiB buffer after a read that fills a sixteenth of it, and grow again', async () => {
    // Given a connection whose sender we drive, read with its own buffers
    let sender: net.Socket | undefined;
    const port = await listen({}, (s) => {
      sender = s;
      cleanups.push(() => s.destroy());
    });
    const socket = connectOwnReads({ port, host: '127.0.0.1' });
    cleanups.push(() => socket.destroy());
    await until(() => sender !== undefined, 'the connection');
    const reads: Array<{ bytes: number; buffer: number }> = [];
    let got = 0;
    ownReads(socket)?.start((chunk) => {
      reads.push({ bytes: chunk.length, buffer: chunk.buffer.byteLength });
      got += chunk.length;
      return 'released';
    });
    const send = async (data: Buffer): Promise<void> => {
      const want = got + data.length;
      sender?.write(data);
      await until(() => got === want, 'the bytes to be read');
    };
    // When 8 MiB arrive while the reader is behind, then 100 bytes alone, then 8 MiB again
    socket.pause();
    await send(Buffer.alloc(0));
    sender?.write(randomBytes(8 * 1024 * 1024));
    await new Promise((r) => setTimeout(r, 100));
    socket.resume();
    await until(() => got === 8 * 1024 * 1024, 'the first 8 MiB');
    const small = reads.length;
    await send(randomBytes(100));
    socket.pause();
    sender?.write(randomBytes(8 * 1024 * 1024));
    await new Promise((r) => setTimeout(r, 100));
    socket.resume();
    await until(() => got === 16 * 1024 * 1024 + 100, 'the second 8 MiB');
    // Then every read went into the buffer the policy names — from 16 KiB, four times larger after a read that filled
    // it, up to 1 MiB; back to 16 KiB after one that filled a sixteenth or less —, it reached 1 MiB, the read after the
    // 100 bytes went into 16 KiB again, and the next ones grew back to 1 MiB
    const policy = ({ bytes, buffer }: { bytes: number; buffer: number }): number =>
      bytes === buffer ? Math.min(4 * buffer, MAX_BUFFER) : bytes * 16 <= buffer ? MIN_BUFFER : buffer;
    expect(reads[0].buffer).toBe(MIN_BUFFER);
    for (const [i, read] of reads.slice(1).entries()) expect(read.buffer).toBe(policy(reads[i]));
    expect(Math.max(...reads.slice(0, small).map((r) => r.buffer))).toBe(MAX_BUFFER);
    expect(reads[small].bytes).toBe(100);
    expect(reads[small + 1].buffer).toBe(MIN_BUFFER);
    expect(Math.max(...reads.slice(small + 1).map((r) => r.buffer))).toBe(MAX_BUFFER);
  });

  it('leave a connection that was already read from as it is', async () => {
    // Given an accepted connection whose first bytes were read by Node
    let taken: net.Socket | undefined;
    const port = await listen({}, (accepted) => {
      accepted.once('data', () => {
        taken = adoptOwnReads(accepted);
      });
    });
    const client = net.connect({ port, host: '127.0.0.1' });
    cleanups.push(() => client.destroy());
    client.write('hello');
    // When it is offered for adoption
    await until(() => taken !== undefined, 'the adoption');
    // Then it stays the socket Node reads
    expect(ownReads(taken as net.Socket)).toBeUndefined();
    expect((taken as net.Socket).destroyed).toBe(false);
  });
});
