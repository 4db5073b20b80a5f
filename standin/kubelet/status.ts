// A pod's status as kubelet reports it: phase from the containers and the restart policy, the conditions with their
// transition times, container/init/ephemeral statuses, pod and host IPs.
import type { V1PodCondition, V1PodStatus } from '@kubernetes/client-node';
import type { PodWorker } from './pod-worker.js';
import { containerStatus, currentAttempt, hasRun, isRunning, type ContainerRecord } from './records.js';

function succeeded(rec: ContainerRecord): boolean {
  return currentAttempt(rec)?.exit?.exitCode === 0;
}

/** Pod phase as kubelet derives it. */
export function podPhase(worker: PodWorker): 'Pending' | 'Running' | 'Succeeded' | 'Failed' {
  const init = worker.recordsOf('init');
  const regular = worker.recordsOf('regular');
  if (init.some((r) => r.done && !succeeded(r))) return 'Failed';
  if (!worker.initialized) return 'Pending';
  if (regular.some((r) => !hasRun(r) && !r.done)) return 'Pending';
  if (regular.some(isRunning)) return 'Running';
  if (regular.every((r) => r.done)) return regular.every(succeeded) ? 'Succeeded' : 'Failed';
  return 'Running';
}

type ConditionState = { status: 'True' | 'False'; reason?: string; message?: string };

/** Builds the status; `previous` carries the transition times of conditions whose status did not change. */
export function podStatus(worker: PodWorker, nodeIP: string, previous?: V1PodStatus): V1PodStatus {
  const phase = podPhase(worker);
  const regular = worker.recordsOf('regular');
  const notReady = regular.filter((r) => !(isRunning(r) && r.ready)).map((r) => r.name);
  const terminal = phase === 'Succeeded' || phase === 'Failed';
  const readyState: ConditionState = terminal
    ? { status: 'False', reason: 'PodCompleted' }
    : notReady.length
      ? {
          status: 'False',
          reason: 'ContainersNotReady',
          message: `containers with unready status: [${notReady.join(' ')}]`,
        }
      : { status: 'True' };
  const pendingInit = worker
    .recordsOf('init')
    .filter((r) => !(r.done && succeeded(r)))
    .map((r) => r.name);
  const states: Record<string, ConditionState> = {
    PodReadyToStartContainers: { status: worker.sandbox ? 'True' : 'False' },
    Initialized: worker.initialized
      ? { status: 'True' }
      : {
          status: 'False',
          reason: 'ContainersNotInitialized',
          message: `containers with incomplete status: [${pendingInit.join(' ')}]`,
        },
    Ready: readyState,
    ContainersReady: readyState,
    PodScheduled: { status: 'True' },
  };
  const now = new Date();
  const conditions: V1PodCondition[] = Object.entries(states).map(([type, state]) => {
    const before = previous?.conditions?.find((c) => c.type === type);
    return {
      type,
      status: state.status,
      lastProbeTime: null as unknown as undefined,
      lastTransitionTime:
        before && before.status === state.status && before.lastTransitionTime ? before.lastTransitionTime : now,
      ...(state.reason ? { reason: state.reason } : {}),
      ...(state.message ? { message: state.message } : {}),
    };
  });
  const podIP = worker.sandbox?.podIP;
  const podIPs = worker.sandbox?.podIPs ?? [];
  const ephemeral = worker.recordsOf('ephemeral');
  return {
    phase,
    conditions,
    hostIP: nodeIP,
    hostIPs: [{ ip: nodeIP }],
    ...(podIP ? { podIP, podIPs: podIPs.map((ip) => ({ ip })) } : {}),
    startTime: worker.startTime,
    qosClass: 'BestEffort',
    ...(worker.recordsOf('init').length
      ? { initContainerStatuses: worker.recordsOf('init').map(containerStatus) }
      : {}),
    containerStatuses: regular.map(containerStatus),
    ...(ephemeral.length ? { ephemeralContainerStatuses: ephemeral.map(containerStatus) } : {}),
  };
}
