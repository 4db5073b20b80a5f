// Job → Pods: parallelism/completions, backoffLimit, status counters and conditions, ttlSecondsAfterFinished.
import { ApiError, type K8sObject } from '../errors.js';
import { nowTime, type Objects } from '../objects.js';
import { recordEvent } from './events.js';
import { controllerRef, isControlledBy, isPodActive, isPodReady, type Controller } from './loop.js';

function finishedAt(job: K8sObject): number | undefined {
  const c = (job.status?.conditions ?? []).find(
    (x: K8sObject) => (x.type === 'Complete' || x.type === 'Failed') && x.status === 'True',
  );
  return c ? Date.parse(job.status?.completionTime ?? c.lastTransitionTime) : undefined;
}

/**
 * kube-controller-manager's job controller (pkg/controller/job/job_controller.go) requeues a Job whose pod create
 * failed with exponential back-off from DefaultJobApiBackOff (1 s) to MaxJobApiBackOff (1 min).
 */
const FIRST_BACKOFF_MS = 1000;
const MAX_BACKOFF_MS = 60_000;
const createBackoff = new Map<string, { next: number; delay: number }>();

/**
 * Creates one of the Job's pods; a refused create (Pod Security admission, a quota, a webhook) becomes a
 * `FailedCreate` Warning on the Job, worded as pkg/controller/controller_utils.go's RealPodControl words it, and
 * delays the next try.
 */
function tryCreatePod(objects: Objects, job: K8sObject, pod: K8sObject): K8sObject | undefined {
  const uid = job.metadata.uid;
  try {
    const created = objects.create(objects.type('/pods'), job.metadata.namespace, pod);
    createBackoff.delete(uid);
    return created;
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    const delay = Math.min((createBackoff.get(uid)?.delay ?? FIRST_BACKOFF_MS / 2) * 2, MAX_BACKOFF_MS);
    createBackoff.set(uid, { next: Date.now() + delay, delay });
    recordEvent(objects, job, 'Warning', 'FailedCreate', `Error creating: ${e.message}`, 'job-controller');
    return undefined;
  }
}

function reconcileJob(objects: Objects, job: K8sObject): void {
  const ns = job.metadata.namespace;
  const jobType = objects.type('batch/jobs');
  const podType = objects.type('/pods');
  const done = finishedAt(job);
  if (done !== undefined) {
    const ttl = job.spec.ttlSecondsAfterFinished;
    if (ttl !== undefined && ttl !== null && Date.now() >= done + ttl * 1000)
      objects.delete(jobType, ns, job.metadata.name, { propagationPolicy: 'Background' });
    return;
  }
  const pods = objects.store.list('/pods', ns).filter((p) => isControlledBy(p, job.metadata.uid));
  const active = pods.filter(isPodActive);
  const succeeded = pods.filter((p) => p.status?.phase === 'Succeeded').length;
  const failed = pods.filter((p) => p.status?.phase === 'Failed').length;
  const completions: number = job.spec.completions ?? 1;
  const now = nowTime();
  const status: K8sObject = {
    ...(job.status ?? {}),
    startTime: job.status?.startTime ?? now,
    uncountedTerminatedPods: {},
  };
  const conditions: K8sObject[] = [];
  if (failed > (job.spec.backoffLimit ?? 6)) {
    for (const p of active) objects.delete(podType, ns, p.metadata.name, {});
    const message = 'Job has reached the specified backoff limit';
    conditions.push({
      type: 'FailureTarget',
      status: 'True',
      reason: 'BackoffLimitExceeded',
      message,
      lastProbeTime: now,
      lastTransitionTime: now,
    });
    conditions.push({
      type: 'Failed',
      status: 'True',
      reason: 'BackoffLimitExceeded',
      message,
      lastProbeTime: now,
      lastTransitionTime: now,
    });
  } else if (succeeded >= completions) {
    conditions.push({
      type: 'SuccessCriteriaMet',
      status: 'True',
      reason: 'CompletionsReached',
      message: 'Reached expected number of succeeded pods',
      lastProbeTime: now,
      lastTransitionTime: now,
    });
    conditions.push({
      type: 'Complete',
      status: 'True',
      reason: 'CompletionsReached',
      message: 'Reached expected number of succeeded pods',
      lastProbeTime: now,
      lastTransitionTime: now,
    });
    status.completionTime = now;
  } else if (!job.spec.suspend) {
    const want = Math.min(job.spec.parallelism ?? 1, completions - succeeded) - active.length;
    const wait = createBackoff.get(job.metadata.uid);
    for (let i = 0; i < want && !(wait && Date.now() < wait.next); i++) {
      const tpl = job.spec.template;
      const created = tryCreatePod(objects, job, {
        metadata: {
          generateName: `${job.metadata.name}-`,
          namespace: ns,
          labels: { ...(tpl.metadata?.labels ?? {}) },
          annotations: tpl.metadata?.annotations,
          ownerReferences: [controllerRef(job)],
        },
        spec: structuredClone(tpl.spec),
      });
      if (!created) break;
      active.push(created);
      recordEvent(
        objects,
        job,
        'Normal',
        'SuccessfulCreate',
        `Created pod: ${created.metadata.name}`,
        'job-controller',
      );
    }
  }
  status.active = active.length || undefined;
  status.succeeded = succeeded || undefined;
  status.failed = failed || undefined;
  status.ready = active.filter(isPodReady).length;
  status.terminating = pods.filter((p) => p.metadata.deletionTimestamp).length;
  if (conditions.some((c) => c.type === 'Complete'))
    recordEvent(objects, job, 'Normal', 'Completed', 'Job completed', 'job-controller');
  if (conditions.some((c) => c.type === 'Failed'))
    recordEvent(
      objects,
      job,
      'Warning',
      'BackoffLimitExceeded',
      'Job has reached the specified backoff limit',
      'job-controller',
    );
  if (conditions.length) {
    status.conditions = [...(job.status?.conditions ?? []), ...conditions];
    status.active = undefined;
  }
  for (const k of Object.keys(status)) if (status[k] === undefined) delete status[k];
  const latest = objects.store.get('batch/jobs', ns, job.metadata.name);
  if (latest) objects.update(jobType, ns, job.metadata.name, { ...latest, status }, { subresource: 'status' });
}

export const jobController: Controller = {
  name: 'job',
  watches: ['batch/jobs', '/pods'],
  reconcile(objects) {
    const jobs = objects.store.list('batch/jobs');
    const uids = new Set(jobs.map((j) => j.metadata.uid));
    for (const uid of createBackoff.keys()) if (!uids.has(uid)) createBackoff.delete(uid);
    for (const job of jobs) {
      if (job.metadata.deletionTimestamp) continue;
      reconcileJob(objects, job);
    }
  },
};
