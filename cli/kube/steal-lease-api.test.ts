// The steal and replace locks against the stand-in's API server: a release that meets a renewal in flight still gives
// the lock back (a devop that stops while its 5-second renewal runs must not leave the port locked, or the workload
// replaced, for another 15 s). The renewal's read or write is held on its way until the release has started.
import { CoordinationV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../test/cluster/index.js';
import { apiErrorCode } from './errors.js';
import { ReplaceLease } from './replace-lease.js';
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

type Step = 'readNamespacedLease' | 'replaceNamespacedLease';

/** Holds the next call of `step` on the lock's own API client until `open()`; `reached` resolves once it is held. */
function holdNext(lock: StealLeases | ReplaceLease, step: Step): { reached: Promise<void>; open(): void } {
  const api = (lock as unknown as { api: CoordinationV1Api }).api;
  const real = api[step].bind(api) as (...args: unknown[]) => Promise<unknown>;
  let open!: () => void;
  let reached!: () => void;
  const gate = new Promise<void>((resolve) => (open = resolve));
  const held = new Promise<void>((resolve) => (reached = resolve));
  (api as unknown as Record<Step, (...args: unknown[]) => Promise<unknown>>)[step] = async (...args) => {
    api[step] = real as never; // only this call
    reached();
    await gate;
    return real(...args);
  };
  return { reached: held, open };
}

async function leaseGone(name: string): Promise<boolean> {
  const api = kc.makeApiClient(CoordinationV1Api);
  const read = await api.readNamespacedLease({ name, namespace: 'default' }).catch((e: unknown) => e);
  return apiErrorCode(read) === 404;
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const steps: Step[] = ['readNamespacedLease', 'replaceNamespacedLease'];

describe('lock release during a renewal', () => {
  it.each(steps)('steal lock: gives it back with the renewal’s %s on its way', async (step) => {
    const workload = { kind: 'deployment' as const, name: `steal-${step.length}` };
    const leases = (user: string) => new StealLeases({ kc, namespace: 'default', workload, user, host: 'box' });
    const mine = leases('alice');
    expect(await mine.take(8080)).toEqual({ ok: true });
    const hold = holdNext(mine, step);
    const renewal = mine.renewAll();
    await hold.reached;
    // When devop stops while the renewal waits on the API
    const release = mine.releaseAll();
    await pause(100);
    hold.open();
    await Promise.all([renewal, release]);
    // Then the Lease is gone, nothing is held (no timer takes it again), and another developer gets the port at once
    expect(await leaseGone(mine.nameFor(8080))).toBe(true);
    expect(mine.heldPorts()).toEqual([]);
    const theirs = leases('bob');
    expect(await theirs.take(8080)).toEqual({ ok: true });
    await theirs.releaseAll();
  });

  it.each(steps)('replace lock: gives it back with the renewal’s %s on its way, reporting no trouble', async (step) => {
    const options = { kc, namespace: 'default', workload: { kind: 'deployment' as const, name: `replace-${step}` } };
    const trouble: string[] = [];
    const mine = new ReplaceLease({ ...options, identity: 'alice@box#1', onTrouble: (m) => trouble.push(m) });
    await mine.take();
    const hold = holdNext(mine, step);
    const renewal = mine.renewNow();
    await hold.reached;
    const release = mine.release();
    await pause(100);
    hold.open();
    await Promise.all([renewal, release]);
    expect(await leaseGone(mine.name)).toBe(true);
    expect(trouble).toEqual([]);
    const theirs = new ReplaceLease({ ...options, identity: 'bob@box#2' });
    await theirs.take();
    await theirs.release();
  });
});
