// The steal lock against the stand-in's API server: a release that meets a renewal in flight still gives the lock back
// (a devop that stops while its 5-second renewal runs must not leave the port locked for another 15 s).
import { CoordinationV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../test/cluster/index.js';
import { apiErrorCode } from './errors.js';
import { StealLeases } from './steal-lease.js';

let cluster: ClusterHandle;
let kc: KubeConfig;

beforeAll(async () => {
  cluster = await startCluster({ kubelet: false });
  kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
});

afterAll(async () => {
  await cluster?.stop();
});

const leasesOf = (workload: string, user: string): StealLeases =>
  new StealLeases({ kc, namespace: 'default', workload: { kind: 'deployment', name: workload }, user, host: 'box' });

describe('steal lock release', () => {
  it('gives the lock back when a renewal is in flight, whichever of its requests the release meets', async () => {
    const api = kc.makeApiClient(CoordinationV1Api);
    // The release starts 0–7 ms after the renewal: before its read, between its read and its write, after both.
    for (let delay = 0; delay < 8; delay++) {
      const mine = leasesOf(`race-${delay}`, 'alice');
      expect(await mine.take(8080)).toEqual({ ok: true });
      const renewal = mine.renewAll();
      await new Promise((resolve) => setTimeout(resolve, delay));
      await mine.releaseAll();
      await renewal;
      // Then the Lease is gone, nothing is held (no timer to take it again), and another developer gets the port
      const read = await api.readNamespacedLease({ name: mine.nameFor(8080), namespace: 'default' }).catch((e) => e);
      expect(apiErrorCode(read), `delay ${delay} ms: the Lease is still there`).toBe(404);
      expect(mine.heldPorts()).toEqual([]);
      const theirs = leasesOf(`race-${delay}`, 'bob');
      expect(await theirs.take(8080)).toEqual({ ok: true });
      await theirs.releaseAll();
    }
  });
});
