// The lock of a `--replace` session: one coordination.k8s.io Lease per workload, in the style of the steal Leases
// (cli/kube/steal-lease.ts), renewed while devop runs. A second developer is refused by name; the guard restores
// the workload once it expires.
import { createHash } from 'node:crypto';
import { CoordinationV1Api, V1MicroTime, type KubeConfig, type V1Lease } from '@kubernetes/client-node';
import { AGENT_LABELS } from '../../shared/agent-contract.js';
import { errorMessage, UserError } from '../../shared/errors.js';
import type { ReplaceKind } from '../../shared/replace-contract.js';
import { apiErrorCode } from '../kube/errors.js';
import {
  LEASE_ANNOTATIONS,
  LEASE_DURATION_SECONDS,
  LEASE_LABEL,
  LEASE_RENEW_MS,
  leaseHolder,
  releaseLease,
  takeLease,
  type LeaseHolder,
} from '../kube/steal-lease.js';

export const REPLACE_LEASE_LABEL_VALUE = 'replace';

export function replaceLeaseName(namespace: string, kind: ReplaceKind, name: string): string {
  const hash = createHash('sha256').update(`${namespace}/${kind}/${name}`).digest('hex').slice(0, 10);
  const readable = `${kind}-${name}`
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, '-')
    .slice(0, 38)
    .replace(/-+$/, '');
  return `devop-replace-${readable}-${hash}`.slice(0, 63);
}

export interface ReplaceLeaseOptions {
  kc: KubeConfig;
  namespace: string;
  workload: { kind: ReplaceKind; name: string };
  /** holderIdentity (user@host#run). */
  identity: string;
  /** The lease was taken by another session (ours had expired) or could not be renewed. */
  onTrouble?: (message: string) => void;
}

export class ReplaceLease {
  private readonly api: CoordinationV1Api;
  readonly name: string;
  private timer: NodeJS.Timeout | undefined;
  /** The renewal in flight: a release waits for it (its write would fail the delete's precondition). */
  private renewal: Promise<void> | undefined;

  constructor(private readonly options: ReplaceLeaseOptions) {
    this.api = options.kc.makeApiClient(CoordinationV1Api);
    this.name = replaceLeaseName(options.namespace, options.workload.kind, options.workload.name);
  }

  private what(): string {
    return `${this.options.workload.kind}/${this.options.workload.name}`;
  }

  /** Takes the lock, or throws naming the session that holds it. Starts renewing it. */
  async take(): Promise<void> {
    const taken = await takeLease(this.api, {
      name: this.name,
      namespace: this.options.namespace,
      identity: this.options.identity,
      lock: `the replace lock of ${this.what()}`,
      newLease: (now) => this.newLease(now),
    });
    if ('holder' in taken) throw this.heldBy(taken.holder);
    this.timer = setInterval(() => void this.renewNow(), LEASE_RENEW_MS);
    this.timer.unref();
  }

  private heldBy(holder: LeaseHolder): UserError {
    return new UserError(
      `${this.what()} is already replaced by ${holder.user}@${holder.host} since ${holder.since} (Lease ${this.name})`,
      'wait until that session ends (its replicas come back then), or run without --replace',
    );
  }

  private newLease(now: V1MicroTime): V1Lease {
    return {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: {
        name: this.name,
        namespace: this.options.namespace,
        labels: {
          [AGENT_LABELS.managedBy]: AGENT_LABELS.managedByValue,
          [LEASE_LABEL]: REPLACE_LEASE_LABEL_VALUE,
        },
        annotations: { [LEASE_ANNOTATIONS.workload]: this.what(), [LEASE_ANNOTATIONS.pid]: String(process.pid) },
      },
      spec: {
        holderIdentity: this.options.identity,
        leaseDurationSeconds: LEASE_DURATION_SECONDS,
        acquireTime: now,
        renewTime: now,
        leaseTransitions: 0,
      },
    };
  }

  /** Renews the Lease once, or joins the renewal in flight (the timer calls it; tests may too). */
  renewNow(): Promise<void> {
    this.renewal ??= this.renew().finally(() => (this.renewal = undefined));
    return this.renewal;
  }

  private async renew(): Promise<void> {
    const { namespace, identity } = this.options;
    try {
      const lease = await this.api.readNamespacedLease({ name: this.name, namespace });
      if (!this.timer) return; // released meanwhile: the release deletes it
      if (lease.spec?.holderIdentity !== identity) {
        const h = leaseHolder(lease);
        this.stop();
        this.options.onTrouble?.(
          `the replace lock of ${this.what()} was taken by ${h.user}@${h.host}: the guard restored the workload`,
        );
        return;
      }
      await this.api.replaceNamespacedLease({
        name: this.name,
        namespace,
        body: { ...lease, spec: { ...lease.spec, renewTime: new V1MicroTime(Date.now()) } },
      });
    } catch (err) {
      if (apiErrorCode(err) === 409) return; // raced with another writer: the next tick reads it again
      if (!this.timer) return; // released meanwhile (deleted under us): no trouble
      if (apiErrorCode(err) === 404) {
        this.stop();
        this.options.onTrouble?.(
          `the replace lock of ${this.what()} was deleted (devop sessions stop): the guard restores the workload`,
        );
        return;
      }
      this.options.onTrouble?.(
        `cannot renew the replace lock of ${this.what()} (${errorMessage(err)}): ` +
          `the guard restores the workload ${LEASE_DURATION_SECONDS} s after the last renewal`,
      );
    }
  }

  private stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Stops renewing and deletes the Lease if it is still ours (after a renewal in flight has ended). */
  async release(): Promise<void> {
    this.stop();
    await this.renewal;
    // Gone or unreachable: it expires by itself, and the guard cleans up then.
    await releaseLease(this.api, this.name, this.options.namespace, this.options.identity);
  }
}
