// What the kubelet remembers about each container of a pod (attempts, restarts, waiting reason, readiness), and how
// that becomes a V1ContainerStatus.
import type { V1Container, V1ContainerState, V1ContainerStatus, V1EphemeralContainer } from '@kubernetes/client-node';
import { SIGNAL_NUMBERS, type ContainerExit, type ContainerProcess } from './container.js';

export type ContainerKind = 'init' | 'regular' | 'ephemeral';

export interface ContainerAttempt {
  id: string;
  logPath: string;
  proc?: ContainerProcess;
  /** Set when the attempt could not start (StartError) or once it has exited. */
  exit?: ContainerExit & { message?: string };
}

export interface ContainerRecord {
  name: string;
  kind: ContainerKind;
  spec: V1Container | V1EphemeralContainer;
  attempts: ContainerAttempt[];
  restartCount: number;
  /** Why the container is not running now (ContainerCreating, ErrImagePull, CrashLoopBackOff, …). */
  waiting?: { reason: string; message?: string };
  /** True when the container will not be started again (completed under its restart policy, or the pod is stopping). */
  done: boolean;
  ready: boolean;
  /** `<repository>@<manifest digest>` of the image once containerd has it (status.imageID). */
  imageID?: string;
}

export function newRecord(spec: V1Container | V1EphemeralContainer, kind: ContainerKind): ContainerRecord {
  return {
    name: spec.name,
    kind,
    spec,
    attempts: [],
    restartCount: 0,
    waiting: { reason: 'ContainerCreating' },
    done: false,
    ready: false,
  };
}

export function currentAttempt(rec: ContainerRecord): ContainerAttempt | undefined {
  return rec.attempts[rec.attempts.length - 1];
}

/** The container's command runs (its launch steps are done, it has not exited). */
export function isRunning(rec: ContainerRecord): boolean {
  const attempt = currentAttempt(rec);
  return Boolean(attempt?.proc?.running && attempt.proc.hasStarted && !attempt.exit);
}

/** A process of the container is alive: its command, or the launch steps before it. */
export function isAlive(rec: ContainerRecord): boolean {
  const attempt = currentAttempt(rec);
  return Boolean(attempt?.proc?.running && !attempt.exit);
}

/** The container's command has run at least once (or an attempt ended), so the pod is past Pending. */
export function hasRun(rec: ContainerRecord): boolean {
  return rec.attempts.some((attempt) => attempt.exit !== undefined || attempt.proc?.hasStarted);
}

function terminatedState(attempt: ContainerAttempt): V1ContainerState {
  const exit = attempt.exit!;
  return {
    terminated: {
      exitCode: exit.exitCode,
      reason: exit.reason,
      ...(exit.message ? { message: exit.message } : {}),
      ...(exit.signal ? { signal: SIGNAL_NUMBERS[exit.signal] } : {}),
      startedAt: exit.startedAt,
      finishedAt: exit.finishedAt,
      containerID: `containerd://${attempt.id}`,
    },
  };
}

/** The V1ContainerStatus of a record, as kubelet reports it. */
export function containerStatus(rec: ContainerRecord): V1ContainerStatus {
  const attempt = currentAttempt(rec);
  const running = isRunning(rec);
  let state: V1ContainerState;
  let lastState: V1ContainerState = {};
  if (running && attempt?.proc) {
    state = { running: { startedAt: attempt.proc.startedAt } };
    const previous = rec.attempts[rec.attempts.length - 2];
    if (previous?.exit) lastState = terminatedState(previous);
  } else if (rec.waiting) {
    state = {
      waiting: { reason: rec.waiting.reason, ...(rec.waiting.message ? { message: rec.waiting.message } : {}) },
    };
    if (attempt?.exit) lastState = terminatedState(attempt);
  } else if (attempt?.exit) {
    state = terminatedState(attempt);
    const previous = rec.attempts[rec.attempts.length - 2];
    if (previous?.exit) lastState = terminatedState(previous);
  } else {
    state = { waiting: { reason: 'ContainerCreating' } };
  }
  const image = rec.spec.image ?? '';
  return {
    name: rec.name,
    state,
    lastState,
    ready: running && rec.ready,
    restartCount: rec.restartCount,
    image,
    imageID: rec.imageID ?? '',
    ...(attempt ? { containerID: `containerd://${attempt.id}` } : {}),
    started: running,
  };
}
