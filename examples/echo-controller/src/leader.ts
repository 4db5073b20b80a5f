// Leader election with a coordination.k8s.io Lease, so that only one of several controller replicas reconciles at a
// time.
import { CoordinationV1Api, V1MicroTime, type KubeConfig, type V1Lease } from '@kubernetes/client-node';

export interface LeaderElectionOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  name: string;
  identity: string;
  /** A holder that has not renewed for this long has lost the lease (client-go's default is 15 s). */
  leaseDurationSeconds?: number;
  /** How often the holder renews and a candidate retries; well under the lease duration. */
  retryPeriodMs?: number;
  log?: (line: string) => void;
  signal?: AbortSignal;
}

export interface Leadership {
  /** Resolves when the lease could not be renewed in time: the caller must stop reconciling (client-go exits). */
  lost: Promise<void>;
  /** Stops renewing and hands the lease back at once, so the next replica does not wait for it to expire. */
  release(): Promise<void>;
}

const LEASE_DURATION_SECONDS = 15;
const RETRY_PERIOD_MS = 2_000;

function statusCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | undefined)?.code;
  return typeof code === 'number' ? code : undefined;
}

/**
 * Waits `ms`, or less when the signal aborts. The abort listener goes when the wait ends either way: renewing every
 * retry period on one signal would otherwise add a listener each time (Node warns at 11: a leak).
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** Whether a lease read at `now` may be taken by `identity`. Pure, for the unit test. */
export function canTake(lease: V1Lease, identity: string, now: Date): boolean {
  const spec = lease.spec ?? {};
  if (!spec.holderIdentity || spec.holderIdentity === identity) return true;
  const renewed = spec.renewTime ?? spec.acquireTime;
  if (!renewed) return true;
  const expiresAt =
    new Date(renewed as unknown as string).getTime() + (spec.leaseDurationSeconds ?? LEASE_DURATION_SECONDS) * 1000;
  return expiresAt < now.getTime();
}

export function takenLease(lease: V1Lease | undefined, identity: string, durationSeconds: number, now: Date): V1Lease {
  const spec = lease?.spec ?? {};
  const changedHands = spec.holderIdentity !== identity;
  return {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: lease?.metadata ?? {},
    spec: {
      ...spec,
      holderIdentity: identity,
      leaseDurationSeconds: durationSeconds,
      renewTime: new V1MicroTime(now.getTime()),
      acquireTime: changedHands ? new V1MicroTime(now.getTime()) : spec.acquireTime,
      leaseTransitions: (spec.leaseTransitions ?? 0) + (changedHands && spec.holderIdentity ? 1 : 0),
    },
  };
}

/**
 * Tries once to hold the lease; true when this identity holds it afterwards. Conflicts mean someone else was faster.
 */
async function tryAcquire(api: CoordinationV1Api, o: LeaderElectionOptions, duration: number): Promise<boolean> {
  let lease: V1Lease | undefined;
  try {
    lease = await api.readNamespacedLease({ namespace: o.namespace, name: o.name });
  } catch (err) {
    if (statusCode(err) !== 404) throw err;
  }
  const now = new Date();
  try {
    if (!lease) {
      const body = takenLease(undefined, o.identity, duration, now);
      await api.createNamespacedLease({
        namespace: o.namespace,
        body: { ...body, metadata: { name: o.name, namespace: o.namespace } },
      });
      return true;
    }
    if (!canTake(lease, o.identity, now)) return false;
    await api.replaceNamespacedLease({
      namespace: o.namespace,
      name: o.name,
      body: takenLease(lease, o.identity, duration, now),
    });
    return true;
  } catch (err) {
    if (statusCode(err) === 409) return false;
    throw err;
  }
}

/** Waits until this identity holds the lease, then keeps renewing it in the background. */
export async function becomeLeader(o: LeaderElectionOptions): Promise<Leadership> {
  const api = o.kubeConfig.makeApiClient(CoordinationV1Api);
  const duration = o.leaseDurationSeconds ?? LEASE_DURATION_SECONDS;
  const retry = o.retryPeriodMs ?? RETRY_PERIOD_MS;
  const log = o.log ?? (() => undefined); // quiet unless the caller wants lines
  let waitingSaid = false;
  for (;;) {
    if (o.signal?.aborted) throw new Error('leader election cancelled');
    const held = await tryAcquire(api, o, duration).catch((err: unknown) => {
      log(`lease ${o.namespace}/${o.name}: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`);
      return false;
    });
    if (held) break;
    if (!waitingSaid) log(`lease ${o.namespace}/${o.name} is held by another replica; waiting`);
    waitingSaid = true;
    await sleep(retry, o.signal);
  }
  log(`lease ${o.namespace}/${o.name} acquired by ${o.identity}`);

  const stop = new AbortController();
  let lastRenew = Date.now();
  const lost = (async () => {
    while (!stop.signal.aborted) {
      await sleep(retry, stop.signal);
      if (stop.signal.aborted) return;
      const held = await tryAcquire(api, o, duration).catch(() => false);
      if (held) lastRenew = Date.now();
      else if (Date.now() - lastRenew > duration * 1000 || !(await stillOurs(api, o))) {
        log(`lease ${o.namespace}/${o.name} lost`);
        return;
      }
    }
  })();
  return {
    lost,
    async release() {
      stop.abort();
      await lost;
      const lease = await api.readNamespacedLease({ namespace: o.namespace, name: o.name }).catch(() => undefined);
      if (lease?.spec?.holderIdentity !== o.identity) return;
      await api
        .replaceNamespacedLease({
          namespace: o.namespace,
          name: o.name,
          body: { ...lease, spec: { ...lease.spec, holderIdentity: '', leaseDurationSeconds: 1 } },
        })
        .catch(() => undefined);
    },
  };
}

async function stillOurs(api: CoordinationV1Api, o: LeaderElectionOptions): Promise<boolean> {
  const lease = await api.readNamespacedLease({ namespace: o.namespace, name: o.name }).catch(() => undefined);
  // Unreadable: keep leading until the lease duration runs out.
  return lease === undefined || lease.spec?.holderIdentity === o.identity;
}
