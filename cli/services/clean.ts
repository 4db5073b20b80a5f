// `devop clean`: decides which of devop's objects in the cluster are leftovers — agent Jobs and pods whose session is
// over, ephemeral agent containers still running, expired steal Leases, what `--replace` left (workloads to restore,
// copies, guards and their accounts) — and removes what can be removed (or only lists it with --dry-run). Listing
// and deleting them is leftovers.ts beside it.
import type { V1Job, V1Lease, V1Pod, V1Secret } from '@kubernetes/client-node';
import { errorMessage } from '../../shared/errors.js';
import { AGENT_ANNOTATIONS, AGENT_CONTAINER_NAME, AGENT_LABELS } from '../../shared/agent-contract.js';
import { loadKubeConfig, type KubeAccessOptions } from '../kube/config.js';
import { TARGETLESS_LABEL_VALUE } from '../kube/agent-manifest.js';
import { GUARD_ACCESS_LABELS } from '../replace/manifest.js';
import {
  deleteLeftover,
  listDevopObjects,
  listReplaceObjects,
  type GuardAccessItem,
  type LeftoverKind,
  type ReplaceObjects,
} from './leftovers.js';
import { REPLACE_ANNOTATIONS, REPLACE_LABELS } from '../../shared/replace-contract.js';
import { LEASE_ANNOTATIONS, leaseHolder, leaseVerdict } from '../kube/steal-lease.js';
import { sweepSessionDirs, type StaleSessionDir } from '../process/session-dirs.js';

export interface CleanOptions extends KubeAccessOptions {
  namespace?: string;
  allNamespaces?: boolean;
  dryRun?: boolean;
  /** Also remove agents that still run beside a live target (they may serve someone's session). */
  force?: boolean;
  now?: () => number;
}

export interface Leftover {
  kind: LeftoverKind;
  namespace: string;
  name: string;
  /** Why it is a leftover, or why it is kept. */
  reason: string;
  /**
   * remove: devop deletes it; keep: in use, left alone; manual: cannot be deleted by devop (the fix says what to do).
   */
  action: 'remove' | 'keep' | 'manual';
  fix?: string;
  /** After a real run: whether the removal worked (error text otherwise). */
  removed?: boolean;
  error?: string;
}

export interface CleanReport {
  namespace: string | 'all';
  dryRun: boolean;
  items: Leftover[];
  /** This machine's session directories whose devop is gone (cli/process/session-dirs.ts). */
  localDirs?: StaleSessionDir[];
}

function finished(job: V1Job): string | undefined {
  const c = job.status?.conditions?.find((x) => (x.type === 'Complete' || x.type === 'Failed') && x.status === 'True');
  return c ? `finished (${c.type}${c.reason ? `: ${c.reason}` : ''})` : undefined;
}

function stuck(pod: V1Pod | undefined): string | undefined {
  if (!pod) return undefined;
  if (pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed') return `its pod ${pod.status.phase}`;
  const waiting = pod.status?.containerStatuses?.find((s) => s.name === AGENT_CONTAINER_NAME)?.state?.waiting?.reason;
  if (waiting && /ImagePull|ErrImage|CrashLoop|CreateContainer/.test(waiting))
    return `its pod cannot start (${waiting})`;
  return undefined;
}

/**
 * Classifies agent Jobs (with their pods) against the live pods. Pure: a Job is a leftover when it finished, its pod
 * cannot start, or the pod it serves is gone; a Job beside a live target is kept unless `force` (it may serve a
 * session, and exits by itself when idle).
 */
export function classifyAgentJobs(
  jobs: V1Job[],
  agentPods: V1Pod[],
  livePodUids: Set<string>,
  force: boolean,
): Leftover[] {
  const out: Leftover[] = [];
  for (const job of jobs) {
    const ns = job.metadata?.namespace ?? '';
    const name = job.metadata?.name ?? '';
    const uid = job.metadata?.uid;
    const pod = agentPods.find(
      (p) =>
        p.metadata?.namespace === ns &&
        (p.metadata?.ownerReferences ?? []).some((o) => o.uid === uid || (o.kind === 'Job' && o.name === name)),
    );
    const targetPod = job.metadata?.labels?.[AGENT_LABELS.targetPod] ?? '';
    const targetUid = job.metadata?.labels?.[AGENT_LABELS.targetUid];
    const owner = job.metadata?.annotations?.[AGENT_ANNOTATIONS.owner];
    const whose = owner ? ` (started by ${owner})` : '';
    const why =
      finished(job) ??
      stuck(pod) ??
      (targetPod !== TARGETLESS_LABEL_VALUE && targetUid && !livePodUids.has(targetUid)
        ? `its target pod ${targetPod} is gone`
        : undefined);
    if (why) out.push({ kind: 'job', namespace: ns, name, reason: `${why}${whose}`, action: 'remove' });
    else if (force)
      out.push({
        kind: 'job',
        namespace: ns,
        name,
        reason: `running for ${targetPod}${whose}; removed because of --force`,
        action: 'remove',
      });
    else
      out.push({
        kind: 'job',
        namespace: ns,
        name,
        reason: `running for ${targetPod}${whose}: it may serve a session and exits by itself when idle`,
        action: 'keep',
        fix: 'pass --force to remove it anyway',
      });
  }
  // Agent pods without a Job (their Job was deleted with orphan propagation, or they were made by hand).
  const jobUids = new Set(jobs.map((j) => j.metadata?.uid));
  for (const pod of agentPods) {
    const owners = pod.metadata?.ownerReferences ?? [];
    if (
      owners.some(
        (o) =>
          o.kind === 'Job' &&
          (jobUids.has(o.uid) ||
            jobs.some((j) => j.metadata?.name === o.name && j.metadata?.namespace === pod.metadata?.namespace)),
      )
    )
      continue;
    out.push({
      kind: 'pod',
      namespace: pod.metadata?.namespace ?? '',
      name: pod.metadata?.name ?? '',
      reason: 'an agent pod without its Job',
      action: 'remove',
    });
  }
  return out;
}

/**
 * Ephemeral agent containers that still run: they cannot be removed from a pod; they end with their last session. Pure.
 */
export function classifyEphemeralAgents(pods: V1Pod[]): Leftover[] {
  const out: Leftover[] = [];
  for (const pod of pods) {
    for (const status of pod.status?.ephemeralContainerStatuses ?? []) {
      if (!status.name.startsWith(`${AGENT_CONTAINER_NAME}-`) || !status.state?.running) continue;
      const ns = pod.metadata?.namespace ?? '';
      const podName = pod.metadata?.name ?? '';
      out.push({
        kind: 'ephemeral',
        namespace: ns,
        name: `${podName}/${status.name}`,
        reason: 'ephemeral agent container still running (Kubernetes cannot remove ephemeral containers)',
        action: 'manual',
        fix:
          `it exits by itself once its sessions end (devop sends bye on exit); to end it now, restart the pod: ` +
          `kubectl delete pod -n ${ns} ${podName} (its controller recreates it)`,
      });
    }
  }
  return out;
}

/**
 * Agents' token Secrets whose agent is over: an ephemeral agent's (owned by its target pod) once its container stopped
 * (its session was killed before deleting it), or one whose owning Job is gone. Pure.
 */
export function classifyAgentSecrets(secrets: V1Secret[], pods: V1Pod[], jobs: V1Job[]): Leftover[] {
  const out: Leftover[] = [];
  for (const secret of secrets) {
    const ns = secret.metadata?.namespace ?? '';
    const name = secret.metadata?.name ?? '';
    const owner = secret.metadata?.ownerReferences?.[0];
    const base = { kind: 'secret' as const, namespace: ns, name };
    if (owner?.kind === 'Pod') {
      const pod = pods.find((p) => p.metadata?.uid === owner.uid);
      // The agent's ephemeral container and its Secret share the name devop-agent-<id>.
      const running = pod?.status?.ephemeralContainerStatuses?.some((c) => c.name === name && c.state?.running);
      if (running) out.push({ ...base, reason: `token of a running ephemeral agent in ${owner.name}`, action: 'keep' });
      else out.push({ ...base, reason: 'token of an ephemeral agent that has ended', action: 'remove' });
    } else if (!jobs.some((j) => j.metadata?.uid === owner?.uid))
      out.push({ ...base, reason: 'token of an agent whose Job is gone', action: 'remove' });
  }
  return out;
}

/** Steal Leases whose holder stopped renewing (devop was killed): removable; live ones are listed as held. Pure. */
export function classifyLeases(leases: V1Lease[], now: number): Leftover[] {
  return leases.map((lease): Leftover => {
    const ns = lease.metadata?.namespace ?? '';
    const name = lease.metadata?.name ?? '';
    const verdict = leaseVerdict(lease, '', now);
    const holder = leaseHolder(lease);
    if (verdict === 'held')
      return {
        kind: 'lease',
        namespace: ns,
        name,
        reason: `held by ${holder.user}@${holder.host} since ${holder.since} (renewed: a session is live)`,
        action: 'keep',
      };
    return {
      kind: 'lease',
      namespace: ns,
      name,
      reason:
        verdict === 'free'
          ? 'released steal lock'
          : `expired steal lock of ${holder.user}@${holder.host} (devop stopped without releasing it)`,
      action: 'remove',
    };
  });
}

/**
 * `--replace` sessions that ended without their restore (devop and the guard both gone): the workload gets its recorded
 * replica count back, its copy pod, guard Job and Lease go. A session whose Lease is still renewed is left alone. Pure.
 */
export function classifyReplaced(found: ReplaceObjects, now: number): Leftover[] {
  const live = found.leases.filter((l) => leaseVerdict(l, '', now) === 'held');
  const liveFor = (namespace: string, name: string): V1Lease | undefined =>
    live.find(
      (l) =>
        l.metadata?.namespace === namespace &&
        (l.metadata?.annotations?.[LEASE_ANNOTATIONS.workload] ?? '').split('/')[1] === name,
    );
  const out: Leftover[] = [];
  for (const w of found.workloads) {
    const lease = liveFor(w.namespace, w.name);
    const holder = w.annotations[REPLACE_ANNOTATIONS.holder] ?? 'an unknown session';
    const replicas = w.annotations[REPLACE_ANNOTATIONS.replicas];
    const base = { kind: 'workload' as const, namespace: w.namespace, name: `${w.kind}/${w.name}` };
    if (lease) {
      const h = leaseHolder(lease);
      out.push({ ...base, reason: `replaced by ${h.user}@${h.host} (a session is live)`, action: 'keep' });
    } else
      out.push({
        ...base,
        reason: `replaced by ${holder.split('#')[0]}, whose session ended: back to ${replicas} replicas`,
        action: 'remove',
      });
  }
  const objects: [Leftover['kind'], V1Pod | V1Job, string][] = [
    ...found.copies.map((p): [Leftover['kind'], V1Pod, string] => ['pod', p, 'copy pod']),
    ...found.guards.map((j): [Leftover['kind'], V1Job, string] => ['job', j, 'replace guard']),
  ];
  for (const [kind, obj, what] of objects) {
    const namespace = obj.metadata?.namespace ?? '';
    const of = obj.metadata?.labels?.[REPLACE_LABELS.of] ?? '';
    const base = { kind, namespace, name: obj.metadata?.name ?? '' };
    if (liveFor(namespace, of)) out.push({ ...base, reason: `${what} of ${of} (a session is live)`, action: 'keep' });
    else out.push({ ...base, reason: `${what} of ${of}, whose session ended`, action: 'remove' });
  }
  out.push(...classifyGuardAccess(found.access, (namespace, of) => Boolean(liveFor(namespace, of)), live));
  for (const lease of found.leases) {
    if (live.includes(lease)) continue;
    const h = leaseHolder(lease);
    out.push({
      kind: 'lease',
      namespace: lease.metadata?.namespace ?? '',
      name: lease.metadata?.name ?? '',
      reason: `expired replace lock of ${h.user}@${h.host}`,
      action: 'remove',
    });
  }
  return out;
}

/** The one namespace-wide guard account (and Role, RoleBinding) an older devop shared between sessions. */
const SHARED_GUARD_ACCOUNT = 'devop-replace-guard';

/**
 * Guards' ServiceAccounts, Roles and RoleBindings: one session's go once that session is over (their guard Job owns
 * them, but a cluster without garbage collection, or an orphaning delete, leaves them); the namespace-wide one of an
 * older devop goes once no replace session is live in its namespace. Other objects with devop's label are not these.
 * Pure.
 */
export function classifyGuardAccess(
  access: GuardAccessItem[],
  liveFor: (namespace: string, workload: string) => boolean,
  liveLeases: V1Lease[],
): Leftover[] {
  const out: Leftover[] = [];
  for (const item of access) {
    const base = { kind: item.kind, namespace: item.namespace, name: item.name };
    const of = item.labels[REPLACE_LABELS.of];
    if (item.labels[REPLACE_LABELS.role] === GUARD_ACCESS_LABELS.roleValue && of) {
      if (liveFor(item.namespace, of))
        out.push({ ...base, reason: `replace guard's account of ${of} (a session is live)`, action: 'keep' });
      else out.push({ ...base, reason: `replace guard's account of ${of}, whose session ended`, action: 'remove' });
    } else if (item.name === SHARED_GUARD_ACCOUNT) {
      const live = liveLeases.some((l) => l.metadata?.namespace === item.namespace);
      if (live)
        out.push({
          ...base,
          reason: 'namespace-wide replace guard account of an older devop (a replace session is live here)',
          action: 'keep',
        });
      else
        out.push({
          ...base,
          reason: 'namespace-wide replace guard account of an older devop: no session uses it',
          action: 'remove',
        });
    }
  }
  return out;
}

export async function runClean(options: CleanOptions): Promise<CleanReport> {
  const localDirs = await sweepSessionDirs({ dryRun: options.dryRun });
  const loaded = loadKubeConfig(options);
  const namespace = options.allNamespaces ? undefined : (options.namespace ?? loaded.namespace);
  const now = (options.now ?? Date.now)();
  const [found, replaced] = await Promise.all([
    listDevopObjects(loaded.kc, namespace),
    listReplaceObjects(loaded.kc, namespace),
  ]);
  const liveUids = new Set(found.pods.filter((p) => !p.metadata?.deletionTimestamp).map((p) => p.metadata?.uid ?? ''));
  const items = [
    // First: a replaced workload gets its replicas back before its copy pod goes.
    ...classifyReplaced(replaced, now),
    ...classifyAgentJobs(found.jobs, found.agentPods, liveUids, options.force ?? false),
    ...classifyEphemeralAgents(found.pods),
    ...classifyAgentSecrets(found.secrets, found.pods, found.jobs),
    ...classifyLeases(found.leases, now),
  ];
  if (!options.dryRun) {
    for (const item of items.filter((i) => i.action === 'remove')) {
      try {
        await deleteLeftover(loaded.kc, item);
        item.removed = true;
      } catch (err) {
        item.removed = false;
        item.error = errorMessage(err);
      }
    }
  }
  return { namespace: namespace ?? 'all', dryRun: options.dryRun ?? false, items, localDirs };
}

const KIND_WORDS: Record<LeftoverKind, string> = {
  job: 'job',
  pod: 'pod',
  ephemeral: 'ephemeral container',
  lease: 'lease',
  workload: '',
  secret: 'secret',
  serviceaccount: 'service account',
  role: 'role',
  rolebinding: 'role binding',
};

export function formatCleanReport(report: CleanReport): string {
  const where = report.namespace === 'all' ? 'any namespace' : `namespace ${report.namespace}`;
  const local = (report.localDirs ?? []).map(
    (d) =>
      `${report.dryRun ? 'would remove' : d.removed ? 'removed' : 'could not remove'} local directory ${d.path}: ` +
      `its devop (pid ${d.pid}) is gone${d.error ? ` (${d.error})` : ''}\n`,
  );
  if (report.items.length === 0) return `${local.join('')}nothing of devop's found in ${where}\n`;
  const lines = report.items.map((i) => {
    // A workload's name is KIND/NAME already: "deployment ns/api".
    const what =
      i.kind === 'workload'
        ? `${i.name.split('/')[0]} ${i.namespace}/${i.name.split('/')[1]}`
        : `${KIND_WORDS[i.kind]} ${i.namespace}/${i.name}`;
    let verb: string;
    if (i.action === 'keep') verb = 'kept';
    else if (i.action === 'manual') verb = 'left';
    else if (i.kind === 'workload')
      verb = report.dryRun ? 'would restore' : i.removed ? 'restored' : 'could not restore';
    else if (report.dryRun) verb = 'would remove';
    else verb = i.removed ? 'removed' : 'could not remove';
    const tail = [i.error && `(${i.error})`, i.fix && `\n    fix: ${i.fix}`].filter(Boolean).join(' ');
    return `${verb} ${what}: ${i.reason}${tail ? ` ${tail}` : ''}`;
  });
  const n = report.items.filter((i) => i.action === 'remove').length;
  lines.push(
    report.dryRun
      ? `devop clean --dry-run: ${n} to remove (run without --dry-run to remove them)`
      : `devop clean: ${report.items.filter((i) => i.removed).length} of ${n} removed`,
  );
  return `${local.join('')}${lines.join('\n')}\n`;
}
