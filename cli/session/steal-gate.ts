// The session's cluster-wide steal locks: an unfiltered steal takes its workload's Lease for the port first (refused
// while another live run holds it); a lock deleted under the session (`devop sessions stop`) stops the session.
import type { KubeConfig } from '@kubernetes/client-node';
import { errorMessage } from '../../shared/errors.js';
import type { AgentMessage, ClientMessage } from '../../shared/protocol.js';
import { StealLeases, type TakeResult, workloadOfPod } from '../kube/steal-lease.js';
import type { ResolvedTarget } from '../kube/target.js';
import { debug, info, type Reporter, warn } from '../reporter.js';

type Subscribe = Extract<ClientMessage, { type: 'subscribe' }>;
type Refused = Extract<AgentMessage, { type: 'refused' }>;

/** Whether a subscribe takes its workload's cluster-wide lock: a steal with no header, path or method filter. */
export function takesStealLock(mode: Subscribe['mode'], filter: Subscribe['filter']): boolean {
  return mode === 'steal' && !(filter?.header || filter?.path || filter?.method);
}

export class StealGate {
  private readonly leases: StealLeases;
  /** Takes started before their subscribe (lockAhead), by port: the subscribe waits for the one on its way. */
  private readonly ahead = new Map<number, Promise<TakeResult>>();

  constructor(
    kc: KubeConfig,
    target: ResolvedTarget,
    identity: { user: string; host: string },
    private readonly reporter: Reporter,
    onStoppedFromOutside: (reason: string) => void,
  ) {
    this.leases = new StealLeases({
      kc,
      namespace: target.namespace,
      workload: workloadOfPod(target.pod),
      user: identity.user,
      host: identity.host,
      onLost: (port, holder) =>
        reporter.emit({
          type: 'error',
          message:
            `lost the steal lock of port ${port} to ${holder.user}@${holder.host} (devop could not renew it ` +
            `in time)`,
          hint: 'run devop again once the other session ends',
        }),
      onStopped: (port) =>
        onStoppedFromOutside(
          `the steal lock of port ${port} (Lease ${this.leases.nameFor(port)}) was deleted (devop sessions stop)`,
        ),
      onRenewError: (port, err) =>
        warn(reporter, `could not renew the steal lock of port ${port}: ${errorMessage(err)}`),
      onExpiredRemoved: (port, lease) =>
        info(reporter, `removed the expired steal lock of port ${port} (Lease ${lease}) an earlier devop left`),
      onAbandonedTaken: (lease, pid) =>
        info(reporter, `took over the steal lock (Lease ${lease}) of your earlier devop (PID ${pid}), which is gone`),
      log: (text) => debug(reporter, text),
    });
  }

  /**
   * Starts taking the locks of ports an unfiltered steal is about to subscribe (while the local command starts), so
   * that the subscribe does not wait for the API server's round trips; the subscribe gets the take's answer.
   */
  lockAhead(ports: readonly number[]): void {
    for (const port of ports) {
      if (this.ahead.has(port)) continue;
      const take = this.leases.take(port);
      take.catch(() => undefined); // the subscribe reads the failure, or the session ends first (releaseAll)
      this.ahead.set(port, take);
    }
  }

  /** Unfiltered steals take the workload's cluster-wide lock first; anything else gives back a lock it held. */
  async gate(msg: Subscribe): Promise<Refused | undefined> {
    const ahead = this.ahead.get(msg.port);
    this.ahead.delete(msg.port);
    if (!takesStealLock(msg.mode, msg.filter)) {
      await ahead?.catch(() => undefined);
      if (this.leases.heldPorts().includes(msg.port)) await this.leases.release(msg.port);
      return undefined;
    }
    try {
      const result = await (ahead ?? this.leases.take(msg.port));
      if (result.ok) return undefined;
      return { type: 'refused', id: msg.id, port: msg.port, reason: result.reason, holder: result.holder };
    } catch (err) {
      // No right to use Leases (or no Lease API): steal without the cluster-wide lock, and say so.
      warn(
        this.reporter,
        `no cluster-wide steal lock for port ${msg.port} (${errorMessage(err)}); ` +
          "only this agent's own lock applies",
      );
      return undefined;
    }
  }

  release(port: number): Promise<void> {
    return this.leases.release(port);
  }

  releaseAll(): Promise<void> {
    return this.leases.releaseAll();
  }
}
