// A watch whose timers all come due at once — as after the stand-in was paused (SIGSTOP) longer than a watch's timeout
// and its bookmark interval — ends cleanly: nothing is written after the response ended (ERR_STREAM_WRITE_AFTER_END,
// an 'error' on the response that once crashed the stand-in), and a client that goes away stops the watch's timers.
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { Catalog } from '../../standin/apiserver/catalog.js';
import { Objects } from '../../standin/apiserver/objects.js';
import { Store } from '../../standin/apiserver/store.js';
import { serveWatch } from '../../standin/apiserver/watch.js';

const servers: Server[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
});

/** A plain HTTP server whose every request is a pods watch; collects what each response emitted as 'error'. */
async function watchServer(params: { timeoutSeconds: number; bookmarkIntervalMs: number }) {
  const store = new Store();
  const objects = new Objects(store, new Catalog(store), { gracefulPods: () => false, serviceNet: '10.96.0' });
  const errors: Error[] = [];
  let stopped = 0;
  const server = createServer((_req, res) => {
    res.on('error', (e) => errors.push(e));
    serveWatch(
      objects,
      res,
      {
        t: objects.type('/pods'),
        match: () => true,
        bookmarks: true,
        sendInitialEvents: false,
        ...params,
      },
      () => () => stopped++,
    );
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  /** Stores `count` pods of ~64 KiB each: their events fill the socket of a client that does not read. */
  const addPods = (count: number) => {
    for (let i = 0; i < count; i++) {
      const name = `p${i}`;
      store.put('/pods', {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name, namespace: 'default', uid: name, annotations: { filler: 'x'.repeat(64 * 1024) } },
      });
    }
  };
  return { port: (server.address() as AddressInfo).port, errors, stopped: () => stopped, addPods };
}

function openWatch(port: number): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    request({ host: '127.0.0.1', port, path: '/api/v1/pods?watch=true' }, resolve).on('error', reject).end();
  });
}

/** Blocks the event loop, as SIGSTOP does the stand-in's: every timer due meanwhile runs in the next turn. */
function pause(ms: number): void {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    // busy: the point is that no timer can run
  }
}

describe('watch timers', () => {
  it('ends cleanly when its timeout and a bookmark come due in the same turn (a paused stand-in resumed)', async () => {
    // Given a watch whose timeout and bookmark timer share one period, and a client that has stopped reading (its
    // socket full, so the response's end cannot finish at once)
    const { port, errors, addPods } = await watchServer({ timeoutSeconds: 1, bookmarkIntervalMs: 1000 });
    const res = await openWatch(port);
    res.socket.pause();
    addPods(200);
    // When the process is paused past both, then resumes
    await new Promise((r) => setTimeout(r, 100));
    pause(1500);
    await new Promise((r) => setTimeout(r, 300));
    res.destroy();
    await new Promise((r) => setTimeout(r, 100));
    // Then nothing was written after the response ended
    expect(errors.map((e) => (e as NodeJS.ErrnoException).code)).toEqual([]);
  });

  it('stops its timers when the client goes away while a bookmark is due', async () => {
    // Given a watch with bookmarks every 200 ms
    const { port, errors, stopped } = await watchServer({ timeoutSeconds: 60, bookmarkIntervalMs: 200 });
    const res = await openWatch(port);
    const first = await new Promise<string>((r) => res.once('data', (c: Buffer) => r(c.toString())));
    expect(JSON.parse(first).type).toBe('BOOKMARK');
    // When the client goes away and the server is paused past the next bookmark
    res.destroy();
    pause(300);
    await new Promise((r) => setTimeout(r, 500));
    // Then the watch stopped (untracked) and nothing was written after its end
    expect(stopped()).toBe(1);
    expect(errors.map((e) => (e as NodeJS.ErrnoException).code)).toEqual([]);
  });
});
