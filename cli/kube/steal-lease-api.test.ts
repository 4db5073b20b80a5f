// The steal and replace locks against the stand-in's API server: a release that meets a renewal in flight still gives
// the lock back (a devop that stops while its 5-second renewal runs must not leave the port locked, or the workload
// replaced, for another 15 s). The renewal's read or write is held on its way until the release has started. And a
// stopping session's releaseAll waits for a take or release of a port still on its way. A lock taken ahead of its
// subscribe (while the local command starts) is the one the subscribe gets.
import { CoordinationV1Api, KubeConfig, V1MicroTime } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { apiErrorCode } from './errors.js';
import { ReplaceLease } from '../replace/lease.js';
import { LEASE_ANNOTATIONS, LEASE_LABEL, LEASE_LABEL_VALUE, StealLeases } from './steal-lease.js';
import { sessionsOfLeases } from '../services/sessions.js';
import type { Reporter } from '../reporter.js';
import { StealGate } from '../session/steal-gate.js';
import type { ResolvedTarget } from './target.js';

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

type Step = 'readNamespacedLease' | 'replaceNamespacedLease' | 'createNamespacedLease';

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
const steps: Exclude<Step, 'createNamespacedLease'>[] = ['readNamespacedLease', 'replaceNamespacedLease'];

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

describe('a session that stops with a lock on its way', () => {
  const leases = (name: string) =>
    new StealLeases({ kc, namespace: 'default', workload: { kind: 'deployment', name }, user: 'alice', host: 'box' });

  it('releaseAll waits for a release the session started without waiting (an unsubscribe)', async () => {
    const mine = leases('unsubscribed');
    expect(await mine.take(8080)).toEqual({ ok: true });
    const hold = holdNext(mine, 'readNamespacedLease');
    void mine.release(8080); // as the session's unsubscribe does
    await hold.reached;
    setTimeout(hold.open, 100);
    // When devop stops, then exits as soon as releaseAll resolves
    await mine.releaseAll();
    // Then the Lease is already gone
    expect(await leaseGone(mine.nameFor(8080))).toBe(true);
  });

  it('releaseAll waits for a take on its way and gives that lock back; no take after it', async () => {
    const mine = leases('taking');
    const hold = holdNext(mine, 'createNamespacedLease');
    const taking = mine.take(8080);
    await hold.reached;
    setTimeout(hold.open, 100);
    await mine.releaseAll();
    expect(await taking).toEqual({ ok: true });
    expect(await leaseGone(mine.nameFor(8080))).toBe(true);
    expect(mine.heldPorts()).toEqual([]);
    await expect(mine.take(8080)).rejects.toThrow(/devop is stopping/);
    expect(await leaseGone(mine.nameFor(8080))).toBe(true);
  });

  it('a release that meets a take on its way gives back what the take got', async () => {
    const mine = leases('retake');
    const hold = holdNext(mine, 'createNamespacedLease');
    const taking = mine.take(8080);
    await hold.reached;
    const release = mine.release(8080);
    setTimeout(hold.open, 100);
    await Promise.all([taking, release]);
    expect(await leaseGone(mine.nameFor(8080))).toBe(true);
    expect(mine.heldPorts()).toEqual([]);
  });
});

describe("a killed devop's expired steal Lease", () => {
  it("is taken over by the next session, which writes its own holder, PID and time (not the dead one's)", async () => {
    // Given the Lease a devop on another machine left when it was killed -9: expired a minute ago, with its PID
    const mine = new StealLeases({
      kc,
      namespace: 'default',
      workload: { kind: 'deployment', name: 'killed' },
      user: 'alice',
      host: 'box',
    });
    const name = mine.nameFor(8080);
    const api = kc.makeApiClient(CoordinationV1Api);
    const minuteAgo = new V1MicroTime(Date.now() - 60_000);
    await api.createNamespacedLease({
      namespace: 'default',
      body: {
        metadata: {
          name,
          labels: { [LEASE_LABEL]: LEASE_LABEL_VALUE },
          annotations: {
            [LEASE_ANNOTATIONS.workload]: 'deployment/killed',
            [LEASE_ANNOTATIONS.port]: '8080',
            [LEASE_ANNOTATIONS.pid]: '4242',
          },
        },
        spec: {
          holderIdentity: 'bob@elsewhere#dead',
          leaseDurationSeconds: 15,
          acquireTime: minuteAgo,
          renewTime: minuteAgo,
          leaseTransitions: 0,
        },
      },
    });
    // When the next session steals that port
    expect(await mine.take(8080)).toEqual({ ok: true });
    // Then the Lease is this session's: its holder, its PID (`devop sessions` shows it), a take-over counted
    const lease = await api.readNamespacedLease({ name, namespace: 'default' });
    expect(lease.spec?.holderIdentity).toBe(mine.identity);
    expect(lease.spec?.leaseTransitions).toBe(1);
    expect(lease.metadata?.annotations?.[LEASE_ANNOTATIONS.pid]).toBe(String(process.pid));
    // And `devop sessions` shows one live session, this one, and nothing of the killed devop's
    const rows = sessionsOfLeases([lease], { user: 'alice', host: 'box', isAlive: () => true }, Date.now());
    expect(rows.map((r) => [r.holder, r.state, r.pid])).toEqual([['alice@box', 'live', process.pid]]);
    await mine.releaseAll();
  });
});

describe('a devop of this machine killed a moment ago (its Lease still live)', () => {
  /** A Lease renewed just now, held by `holder`'s devop with PID `pid`, as a kill -9 leaves it. */
  async function liveLeaseOf(name: string, workload: string, holder: string, pid: number): Promise<void> {
    const now = new V1MicroTime(Date.now());
    await kc.makeApiClient(CoordinationV1Api).createNamespacedLease({
      namespace: 'default',
      body: {
        metadata: {
          name,
          labels: { [LEASE_LABEL]: LEASE_LABEL_VALUE },
          annotations: {
            [LEASE_ANNOTATIONS.workload]: `deployment/${workload}`,
            [LEASE_ANNOTATIONS.port]: '8080',
            [LEASE_ANNOTATIONS.pid]: String(pid),
          },
        },
        spec: { holderIdentity: holder, leaseDurationSeconds: 15, acquireTime: now, renewTime: now },
      },
    });
  }

  it("its Lease is taken over by the same user's next devop at once; a live PID's, or another user's, is not", async () => {
    const deadPid = 4_000_001;
    const isAlive = (pid: number) => pid !== deadPid;
    const session = (workload: string, user: string) =>
      new StealLeases({
        kc,
        namespace: 'default',
        workload: { kind: 'deployment', name: workload },
        user,
        host: 'box',
        isAlive,
      });
    // Given alice's devop on this machine (box) was killed a moment ago: its Lease is still live, its PID gone
    const next = session('killed-now', 'alice');
    await liveLeaseOf(next.nameFor(8080), 'killed-now', 'alice@box#dead', deadPid);
    // When her next devop steals the port: taken over at once, not refused for the Lease's 15 s
    expect(await next.take(8080)).toEqual({ ok: true });
    await next.releaseAll();
    // When bob's devop on this machine meets alice's live Lease with a dead PID: refused, naming her
    const bobs = session('alice-killed', 'bob');
    await liveLeaseOf(bobs.nameFor(8080), 'alice-killed', 'alice@box#dead', deadPid);
    expect(await bobs.take(8080)).toMatchObject({ ok: false, holder: { user: 'alice', host: 'box' } });
    // When alice meets her own Lease whose devop still runs (another terminal): refused too
    const second = session('still-running', 'alice');
    await liveLeaseOf(second.nameFor(8080), 'still-running', 'alice@box#other', process.pid + 1);
    expect(await second.take(8080)).toMatchObject({ ok: false, holder: { user: 'alice', host: 'box' } });
  });
});

describe('a steal lock taken ahead of its subscribe (StealGate.lockAhead)', () => {
  const target = (pod: string) =>
    ({ namespace: 'default', pod: { metadata: { name: pod, namespace: 'default' } } }) as unknown as ResolvedTarget;
  const gate = (pod: string, user: string) =>
    new StealGate(
      kc,
      target(pod),
      { user, host: 'box' },
      { emit: () => undefined } as unknown as Reporter,
      () => undefined,
    );
  const subscribe = (port: number, filter?: { header: string }) =>
    ({ type: 'subscribe', id: `sub-${port}`, port, mode: 'steal', ...(filter ? { filter } : {}) }) as never;

  it('Given the lock is taken while the command starts, When the steal subscribes, Then it holds the lock taken then', async () => {
    const mine = gate('ahead', 'alice');
    const leases = (mine as unknown as { leases: StealLeases }).leases;
    // Given the session takes the lock ahead, with the Lease's create held on its way
    const hold = holdNext(leases, 'createNamespacedLease');
    mine.lockAhead([8080]);
    // Then the take is on its way before any subscribe
    await hold.reached;
    // When the subscribe comes while it is still on its way, it waits for that take, and passes once it lands
    const passed = mine.gate(subscribe(8080));
    setTimeout(hold.open, 50);
    expect(await passed).toBeUndefined();
    expect(await leaseGone(leases.nameFor(8080))).toBe(false);
    // And another user's unfiltered steal of the port is refused, naming the holder
    const refused = await gate('ahead', 'bob').gate(subscribe(8080));
    expect(refused).toMatchObject({ type: 'refused', port: 8080, holder: { user: 'alice' } });
    await leases.releaseAll();
    expect(await leaseGone(leases.nameFor(8080))).toBe(true);
  });

  it('Given the lock was taken ahead, When the port is subscribed with a header filter instead, Then it is given back', async () => {
    const mine = gate('ahead-filtered', 'alice');
    const leases = (mine as unknown as { leases: StealLeases }).leases;
    mine.lockAhead([8080]);
    expect(await mine.gate(subscribe(8080, { header: 'x-dev: alice' }))).toBeUndefined();
    expect(await leaseGone(leases.nameFor(8080))).toBe(true);
    expect(leases.heldPorts()).toEqual([]);
  });
});
