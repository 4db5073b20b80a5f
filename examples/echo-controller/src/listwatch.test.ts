// List+watch against an API server on loopback: events flow, a watch that ends resumes from the last resourceVersion,
// and an expired one (410) leads to a re-list that reports what vanished meanwhile.
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import { afterEach, describe, expect, it } from 'vitest';
import { ListWatch, type EventType } from './listwatch.js';

interface Obj {
  metadata: { name: string; namespace: string; resourceVersion: string };
}

const obj = (name: string, rv: string): Obj => ({ metadata: { name, namespace: 'default', resourceVersion: rv } });

async function until(cond: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

function kubeConfigFor(port: number): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'loop', server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
    users: [{ name: 'u', token: 't' }],
    contexts: [{ name: 'c', cluster: 'loop', user: 'u' }],
    currentContext: 'c',
  });
  return kc;
}

describe('ListWatch', () => {
  it('resumes after a watch ends and re-lists after 410 Gone', async () => {
    // Given an API server whose first watch delivers one event and ends, whose second reports 410, and whose
    // second list no longer has object a
    const watchRequests: string[] = [];
    let lists = 0;
    const open: ServerResponse[] = [];
    const server = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://x');
      if (url.searchParams.get('watch') !== 'true') {
        lists += 1;
        const items = lists === 1 ? [obj('a', '1')] : [obj('b', '5')];
        res.end(JSON.stringify({ items, metadata: { resourceVersion: lists === 1 ? '1' : '5' } }));
        return;
      }
      // The answer depends on where the client resumes from, so a retried request (a connection that failed under load)
      // gets the same answer again.
      const rv = url.searchParams.get('resourceVersion') ?? '';
      watchRequests.push(rv);
      res.writeHead(200, { 'Content-Type': 'application/json' });
      if (rv === '1') {
        res.end(`${JSON.stringify({ type: 'ADDED', object: obj('b', '2') })}\n`);
      } else if (rv === '2') {
        res.end(
          `${JSON.stringify({
            type: 'ERROR',
            object: { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version' },
          })}\n`,
        );
      } else {
        if (rv === '5') res.write(`${JSON.stringify({ type: 'MODIFIED', object: obj('b', '6') })}\n`);
        open.push(res);
      }
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    cleanups.push(() => {
      for (const r of open) r.destroy();
      server.close();
    });
    const kc = kubeConfigFor((server.address() as AddressInfo).port);
    const events: string[] = [];
    const errors: string[] = [];
    const lw = new ListWatch<Obj>({
      kubeConfig: kc,
      path: '/apis/example.com/v1/echoes',
      retryMs: 10,
      list: async () => {
        const res = await fetch(`${kc.getCurrentCluster()!.server}/apis/example.com/v1/echoes`);
        return (await res.json()) as { items: Obj[]; metadata: { resourceVersion: string } };
      },
      onEvent: (type: EventType, o) => events.push(`${type} ${o.metadata.name}@${o.metadata.resourceVersion}`),
      onError: (err) => errors.push(String(err)),
    });
    cleanups.push(() => lw.stop());

    // When the ListWatch runs
    lw.start();
    await until(() => events.length >= 5, 'five events').catch((e: Error) => {
      throw new Error(
        `${e.message}: events ${JSON.stringify(events)}, watches from ${JSON.stringify(watchRequests)}, errors ` +
          `${JSON.stringify(errors)}`,
      );
    });

    // Then: list a; the watch from 1 adds b; it resumes from 2 and is told 410; the re-list reports b changed and a
    // gone (deleted while the watch could not say so); the watch from 5 goes on
    expect(events).toEqual(['ADDED a@1', 'ADDED b@2', 'MODIFIED b@5', 'DELETED a@1', 'MODIFIED b@6']);
    expect(lw.lists).toBe(2);
    // And each resourceVersion was asked in this order (a request may repeat if its connection failed under load).
    expect(watchRequests.filter((rv, i) => rv !== watchRequests[i - 1])).toEqual(['1', '2', '5']);
  });
});
