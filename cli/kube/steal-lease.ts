// Cluster-wide steal locks: an unfiltered steal of a workload's port holds a coordination.k8s.io Lease, renewed while
// held, so a second developer (even through another agent on another pod of the same deployment) is refused by name.
import { createHash, randomBytes } from 'node:crypto';
import { CoordinationV1Api, V1MicroTime, type KubeConfig, type V1Lease, type V1Pod } from '@kubernetes/client-node';
import { AGENT_LABELS } from '../../shared/agent-contract.js';
import { errorMessage, UserError } from '../../shared/errors.js';
import { processAlive } from '../process/session-dirs.js';
import { apiErrorCode, mapApiError } from './errors.js';

/**
 * A dead devop's lock frees itself after this long (the holder renews every LEASE_RENEW_MS, so 3 renewals may fail).
 */
export const LEASE_DURATION_SECONDS = 15;
export const LEASE_RENEW_MS = 5000;
/** Label value that marks devop's steal Leases (`devop clean` finds them by it). */
export const LEASE_LABEL = 'devop.dev/lease';
export const LEASE_LABEL_VALUE = 'steal';
/** What a Lease locks, and the devop process holding it (`devop sessions` shows the PID on the holder's machine). */
export const LEASE_ANNOTATIONS = {
  workload: 'devop.dev/workload',
  port: 'devop.dev/port',
  pid: 'devop.dev/pid',
} as const;

export interface Workload {
  kind: 'deployment' | 'statefulset' | 'rollout' | 'pod';
  name: string;
}

export interface LeaseHolder {
  user: string;
  host: string;
  since: string;
}

export type TakeResult = { ok: true } | { ok: false; reason: string; holder: LeaseHolder };

/**
 * The workload a pod belongs to: a ReplicaSet owner named `<deployment>-<pod-template-hash>` is its Deployment, a
 * StatefulSet owner itself; otherwise the pod alone. Pure: the lock must be the same whichever replica a session
 * targets.
 */
export function workloadOfPod(pod: V1Pod): Workload {
  const owner = pod.metadata?.ownerReferences?.find((o) => o.controller) ?? pod.metadata?.ownerReferences?.[0];
  const hash = pod.metadata?.labels?.['pod-template-hash'];
  if (owner?.kind === 'ReplicaSet' && hash && owner.name.endsWith(`-${hash}`)) {
    const rolloutHash = pod.metadata?.labels?.['rollouts-pod-template-hash'];
    return { kind: rolloutHash ? 'rollout' : 'deployment', name: owner.name.slice(0, -hash.length - 1) };
  }
  if (owner?.kind === 'StatefulSet') return { kind: 'statefulset', name: owner.name };
  if (owner?.kind === 'Rollout') return { kind: 'rollout', name: owner.name };
  return { kind: 'pod', name: pod.metadata?.name ?? '' };
}

/** Lease names are DNS subdomains; a readable prefix plus a hash keeps them unique and ≤ 63 characters. */
export function stealLeaseName(namespace: string, workload: Workload, port: number): string {
  const hash = createHash('sha256')
    .update(`${namespace}/${workload.kind}/${workload.name}/${port}`)
    .digest('hex')
    .slice(0, 10);
  const readable = `${workload.kind}-${workload.name}`
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, '-')
    .slice(0, 36)
    .replace(/-+$/, '');
  return `devop-steal-${readable}-${port}-${hash}`.slice(0, 63);
}

/** holderIdentity: who (user@host) and which run (so a second run of the same user is a different holder). */
export function holderIdentity(user: string, host: string, run: string): string {
  return `${user}@${host}#${run}`;
}

export function parseHolderIdentity(identity: string): { user: string; host: string; run: string } {
  const hashAt = identity.lastIndexOf('#');
  const who = hashAt >= 0 ? identity.slice(0, hashAt) : identity;
  const at = who.lastIndexOf('@');
  return {
    user: at >= 0 ? who.slice(0, at) : who,
    host: at >= 0 ? who.slice(at + 1) : '',
    run: hashAt >= 0 ? identity.slice(hashAt + 1) : '',
  };
}

function time(value: unknown): number | undefined {
  if (value === undefined || value === null) return undefined;
  const t = new Date(value as string | Date).getTime();
  return Number.isNaN(t) ? undefined : t;
}

/** Whether a lease is free for `identity` at `now`: unheld, ours, or expired (renewTime + duration passed). Pure. */
export function leaseVerdict(lease: V1Lease, identity: string, now: number): 'free' | 'ours' | 'expired' | 'held' {
  const holder = lease.spec?.holderIdentity;
  if (!holder) return 'free';
  if (holder === identity) return 'ours';
  const renewed = time(lease.spec?.renewTime) ?? time(lease.spec?.acquireTime) ?? 0;
  const duration = (lease.spec?.leaseDurationSeconds ?? LEASE_DURATION_SECONDS) * 1000;
  return renewed + duration < now ? 'expired' : 'held';
}

export function leaseHolder(lease: V1Lease): LeaseHolder {
  const { user, host } = parseHolderIdentity(lease.spec?.holderIdentity ?? '');
  const since = time(lease.spec?.acquireTime);
  return { user, host, since: since !== undefined ? new Date(since).toISOString() : 'unknown' };
}

export interface TakeLeaseOptions {
  name: string;
  namespace: string;
  identity: string;
  /** What the Lease locks, for messages: "the steal lock of port 8080". */
  lock: string;
  /** The Lease to create when there is none. */
  newLease: (now: V1MicroTime) => V1Lease;
  /** A held Lease whose holder is known to be gone (a devop of this machine that was killed): taken over too. */
  abandoned?: (lease: V1Lease) => boolean;
  now?: () => number;
}

/**
 * Takes the named Lease for `identity`: creates it, or takes over one that is free, expired or already ours (keeping
 * its acquireTime then); reads again when another writer wins the race. Resolves with the holder when another live
 * session holds it.
 */
export async function takeLease(
  api: CoordinationV1Api,
  options: TakeLeaseOptions,
): Promise<{ taken: true } | { holder: LeaseHolder }> {
  const { name, namespace, identity } = options;
  const clock = options.now ?? Date.now;
  const ctx = {
    action: `take ${options.lock}`,
    verb: 'create',
    resource: 'leases.coordination.k8s.io',
    namespace,
    name,
  };
  for (let attempt = 0; attempt < 5; attempt++) {
    let existing: V1Lease | undefined;
    try {
      existing = await api.readNamespacedLease({ name, namespace });
    } catch (err) {
      if (apiErrorCode(err) !== 404) throw mapApiError(err, { ...ctx, verb: 'get' });
    }
    const now = new V1MicroTime(clock());
    if (!existing) {
      try {
        await api.createNamespacedLease({ namespace, body: options.newLease(now) });
        return { taken: true };
      } catch (err) {
        if (apiErrorCode(err) === 409) continue; // someone created it a moment ago: read it again
        throw mapApiError(err, ctx);
      }
    }
    const verdict = leaseVerdict(existing, identity, clock());
    if (verdict === 'held' && !options.abandoned?.(existing)) return { holder: leaseHolder(existing) };
    const spec = existing.spec ?? {};
    // Taken over (free or expired): the labels and annotations are the new holder's (its PID above all: the dead
    // devop's stayed, and `devop sessions` showed it for the live session).
    const fresh = verdict === 'ours' ? undefined : options.newLease(now).metadata;
    const body: V1Lease = {
      ...existing,
      metadata: fresh
        ? { ...existing.metadata, labels: fresh.labels, annotations: fresh.annotations }
        : existing.metadata,
      spec: {
        ...spec,
        holderIdentity: identity,
        leaseDurationSeconds: LEASE_DURATION_SECONDS,
        renewTime: now,
        ...(verdict === 'ours' ? {} : { acquireTime: now, leaseTransitions: (spec.leaseTransitions ?? 0) + 1 }),
      },
    };
    try {
      await api.replaceNamespacedLease({ name, namespace, body });
      return { taken: true };
    } catch (err) {
      // Another session took it between our read and write, or it was deleted meanwhile (an expired one, removed by
      // this run's own removeExpired or by `devop clean`): read again.
      if (apiErrorCode(err) === 409 || apiErrorCode(err) === 404) continue;
      throw mapApiError(err, { ...ctx, verb: 'update' });
    }
  }
  throw new UserError(
    `${options.lock} (Lease ${name}) kept changing while devop tried to take it`,
    'another session is taking it at the same moment: run devop again',
  );
}

/**
 * Deletes the named Lease if `identity` still holds it; resolves false when it could not (the Lease then expires by
 * itself). A 409 means another write came between our read and delete (someone's take-over, or a renewal of ours still
 * on its way): read again; three tries. Gone already, or someone else's, is done.
 */
export async function releaseLease(
  api: CoordinationV1Api,
  name: string,
  namespace: string,
  identity: string,
): Promise<boolean> {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const lease = await api.readNamespacedLease({ name, namespace });
      if (lease.spec?.holderIdentity !== identity) return true;
      await api.deleteNamespacedLease({
        name,
        namespace,
        body: { preconditions: { resourceVersion: lease.metadata?.resourceVersion } },
      });
      return true;
    } catch (err) {
      if (apiErrorCode(err) === 404) return true;
      if (apiErrorCode(err) !== 409) return false;
    }
  }
  return false;
}

export interface StealLeaseOptions {
  kc: KubeConfig;
  namespace: string;
  workload: Workload;
  user: string;
  host: string;
  /** Identifies this run; default random. */
  run?: string;
  /** Called when a held lease is lost (taken over after we failed to renew in time). */
  onLost?: (port: number, holder: LeaseHolder) => void;
  /**
   * Called when a held lease was deleted under the session (`devop sessions stop`, or `devop clean` after it expired):
   * the session is asked to end. Without it, the lock is taken again.
   */
  onStopped?: (port: number) => void;
  /** Called when renewing fails for a reason other than losing it (e.g. the API server is unreachable). */
  onRenewError?: (port: number, err: unknown) => void;
  /** An expired Lease of an earlier run of this user on the workload was removed (removeExpired). */
  onExpiredRemoved?: (port: number, lease: string) => void;
  /** A live Lease of a run of this user on this machine whose devop is gone was taken over (abandoned). */
  onAbandonedTaken?: (lease: string, pid: number) => void;
  /** Each lock taken and given back, for the debug log. */
  log?: (message: string) => void;
  /** Whether a process of this machine runs (default: signal 0); tests pass their own. */
  isAlive?: (pid: number) => boolean;
  now?: () => number;
}

/** The steal Leases of one devop run: take one per unfiltered stolen port, renew them, release them. */
export class StealLeases {
  private readonly api: CoordinationV1Api;
  readonly identity: string;
  private readonly held = new Map<number, string>();
  /** Each port's renewal in flight: a release waits for it, or the two would race (below). */
  private readonly renewing = new Map<number, Promise<void>>();
  /** Each port's last take or release, still on its way: the next one runs after it, releaseAll waits for all. */
  private readonly queued = new Map<number, Promise<unknown>>();
  private closed = false;
  /** The removal of this user's expired Leases on the workload, started by the first take. */
  private swept: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private readonly now: () => number;

  constructor(private readonly options: StealLeaseOptions) {
    this.api = options.kc.makeApiClient(CoordinationV1Api);
    this.identity = holderIdentity(options.user, options.host, options.run ?? randomBytes(4).toString('hex'));
    this.now = options.now ?? Date.now;
  }

  nameFor(port: number): string {
    return stealLeaseName(this.options.namespace, this.options.workload, port);
  }

  heldPorts(): number[] {
    return [...this.held.keys()];
  }

  /**
   * Takes (or keeps) the lock of `port`; refused with the holder when another live run holds it. After releaseAll
   * began it throws: a take completing then would hold a Lease nobody gives back.
   */
  take(port: number): Promise<TakeResult> {
    // The first take also removes what an earlier run of this user left on the workload (beside it: no extra wait).
    this.swept ??= this.removeExpired().catch((err: unknown) =>
      this.options.log?.(`expired steal locks not removed: ${errorMessage(err)}`),
    );
    const swept = this.swept;
    return this.inTurn(port, async () => {
      if (this.closed) throw new UserError('devop is stopping: no steal lock is taken now', 'run devop again');
      const [result] = await Promise.all([this.takeNow(port), swept]);
      return result;
    });
  }

  /**
   * Deletes the expired steal Leases of this user@host on this workload: an earlier devop killed before it released
   * them (kill -9), which `devop sessions` would list until `devop clean`. Expired as kube-apiserver's own lease GC
   * reads it (pkg/controlplane/controller/apiserverleasegc/gc_controller.go): renewTime + leaseDurationSeconds passed
   * (leaseVerdict). Each delete is conditional on the Lease as read, so a take-over or renewal in between keeps it.
   * Other users' expired Leases are `devop clean`'s.
   */
  private async removeExpired(): Promise<void> {
    const { namespace, workload, user, host } = this.options;
    const list = await this.api.listNamespacedLease({
      namespace,
      labelSelector: `${LEASE_LABEL}=${LEASE_LABEL_VALUE}`,
    });
    const now = this.now();
    for (const lease of list.items) {
      const holder = parseHolderIdentity(lease.spec?.holderIdentity ?? '');
      const ours = holder.user === user && holder.host === host;
      const annotations = lease.metadata?.annotations ?? {};
      if (!ours || annotations[LEASE_ANNOTATIONS.workload] !== `${workload.kind}/${workload.name}`) continue;
      if (leaseVerdict(lease, this.identity, now) !== 'expired') continue;
      const name = lease.metadata?.name ?? '';
      try {
        await this.api.deleteNamespacedLease({
          name,
          namespace,
          body: { preconditions: { resourceVersion: lease.metadata?.resourceVersion } },
        });
        this.options.onExpiredRemoved?.(Number(annotations[LEASE_ANNOTATIONS.port]), name);
      } catch (err) {
        if (apiErrorCode(err) !== 404 && apiErrorCode(err) !== 409) throw err;
      }
    }
  }

  /**
   * Runs one take or release of `port` after the one before it: a release (the session unsubscribing, or stopping)
   * that met a take on its way would find nothing held and leave the Lease the take then created.
   */
  private inTurn<T>(port: number, op: () => Promise<T>): Promise<T> {
    const result = (this.queued.get(port) ?? Promise.resolve()).then(op);
    const settled = result.catch(() => undefined);
    this.queued.set(port, settled);
    void settled.then(() => {
      if (this.queued.get(port) === settled) this.queued.delete(port);
    });
    return result;
  }

  /**
   * A live Lease of this user@host whose devop (its PID annotation) no longer runs on this machine: a run killed a
   * moment ago (kill -9), whose Lease would otherwise refuse this run until it expires. Taken over at once; a PID now
   * reused by another process keeps the Lease held (the safe side), and so does any other machine's.
   */
  private abandoned(lease: V1Lease): boolean {
    const holder = parseHolderIdentity(lease.spec?.holderIdentity ?? '');
    if (holder.user !== this.options.user || holder.host !== this.options.host) return false;
    const pid = Number(lease.metadata?.annotations?.[LEASE_ANNOTATIONS.pid]);
    if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid) return false;
    const abandoned = !(this.options.isAlive ?? processAlive)(pid);
    if (abandoned) this.options.onAbandonedTaken?.(lease.metadata?.name ?? '', pid);
    return abandoned;
  }

  private async takeNow(port: number): Promise<TakeResult> {
    const name = this.nameFor(port);
    const taken = await takeLease(this.api, {
      name,
      namespace: this.options.namespace,
      identity: this.identity,
      lock: `the steal lock of port ${port}`,
      newLease: (now) => this.newLease(name, port, now),
      abandoned: (lease) => this.abandoned(lease),
      now: this.now,
    });
    if ('holder' in taken) {
      const { holder } = taken;
      return {
        ok: false,
        holder,
        reason:
          `port ${port} of ${this.options.workload.kind}/${this.options.workload.name} is stolen by ` +
          `${holder.user}@${holder.host} since ${holder.since} (Lease ${name})`,
      };
    }
    this.hold(port, name);
    this.options.log?.(`took the steal lock of port ${port} (Lease ${name})`);
    return { ok: true };
  }

  private newLease(name: string, port: number, now: V1MicroTime): V1Lease {
    return {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: {
        name,
        namespace: this.options.namespace,
        labels: { [AGENT_LABELS.managedBy]: AGENT_LABELS.managedByValue, [LEASE_LABEL]: LEASE_LABEL_VALUE },
        annotations: {
          [LEASE_ANNOTATIONS.workload]: `${this.options.workload.kind}/${this.options.workload.name}`,
          [LEASE_ANNOTATIONS.port]: String(port),
          [LEASE_ANNOTATIONS.pid]: String(process.pid),
        },
      },
      spec: {
        holderIdentity: this.identity,
        leaseDurationSeconds: LEASE_DURATION_SECONDS,
        acquireTime: now,
        renewTime: now,
        leaseTransitions: 0,
      },
    };
  }

  private hold(port: number, name: string): void {
    this.held.set(port, name);
    if (!this.timer) {
      this.timer = setInterval(() => void this.renewAll(), LEASE_RENEW_MS);
      this.timer.unref();
    }
  }

  /** Renews every held lease once (the timer calls it; tests may too). */
  async renewAll(): Promise<void> {
    await Promise.all(
      [...this.held.keys()].map((port) => {
        const renewal = this.renewing.get(port) ?? this.renew(port).finally(() => this.renewing.delete(port));
        this.renewing.set(port, renewal);
        return renewal;
      }),
    );
  }

  private async renew(port: number): Promise<void> {
    const name = this.held.get(port);
    if (!name) return;
    const namespace = this.options.namespace;
    try {
      const lease = await this.api.readNamespacedLease({ name, namespace });
      if (this.held.get(port) !== name) return; // released meanwhile: the release deletes it
      if (lease.spec?.holderIdentity !== this.identity) {
        this.held.delete(port);
        this.options.onLost?.(port, leaseHolder(lease));
        return;
      }
      await this.api.replaceNamespacedLease({
        name,
        namespace,
        body: { ...lease, spec: { ...lease.spec, renewTime: new V1MicroTime(this.now()) } },
      });
    } catch (err) {
      if (apiErrorCode(err) === 404) {
        // Deleted while ours (not by our own release): `devop sessions stop` asks this session to end.
        if (this.held.get(port) !== name) return;
        this.unhold(port);
        if (this.options.onStopped) {
          this.options.onStopped(port);
          return;
        }
        await this.takeNow(port).catch((e: unknown) => this.options.onRenewError?.(port, e));
        return;
      }
      if (apiErrorCode(err) === 409) return; // raced with another writer: the next tick reads it again
      this.options.onRenewError?.(port, err);
    }
  }

  /**
   * Gives one port's lock back (deletes the Lease if it is still ours). A renewal in flight is waited for first: its
   * write would otherwise make the delete's precondition fail (the Lease left held, renewed a moment ago), or find the
   * Lease deleted and take it again. A take of the port on its way is waited for too (inTurn).
   */
  release(port: number): Promise<void> {
    return this.inTurn(port, async () => {
      const name = this.held.get(port);
      if (!name) return;
      this.unhold(port);
      await this.renewing.get(port);
      this.unhold(port); // a renewal that found the Lease gone may have taken it again
      const released = await releaseLease(this.api, name, this.options.namespace, this.identity);
      this.options.log?.(
        released
          ? `gave back the steal lock of port ${port} (Lease ${name})`
          : `could not give back the steal lock of port ${port}: Lease ${name} expires ${LEASE_DURATION_SECONDS} s ` +
              'after its last renewal',
      );
    });
  }

  private unhold(port: number): void {
    this.held.delete(port);
    if (this.held.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  /**
   * Gives every lock back, once every take and release on its way has ended (a release the session started without
   * waiting, as an unsubscribe does, must not be cut off by devop exiting). No take runs after it began.
   */
  async releaseAll(): Promise<void> {
    this.closed = true;
    const ports = new Set([...this.held.keys(), ...this.queued.keys()]);
    await Promise.all([...ports].map((port) => this.release(port)));
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}
