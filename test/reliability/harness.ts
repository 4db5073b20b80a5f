// Helpers for the reliability suites: deployments with N replicas, the DEVOP iptables rules inside a pod's netns, the
// agent's processes (to kill them or sample their RSS), and a recovery clock for the 2-second failure rule.
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { promisify } from 'node:util';
import type { AppsV1Api, CoreV1Api, V1Pod } from '@kubernetes/client-node';
import { AGENT_LABELS } from '../../shared/agent-contract.js';
import { isReady, pidsOfContainer } from '../../testkit/pods.js';
import type { Cluster } from '../../testkit/e2e.js';
import { waitFor } from '../../testkit/wait.js';

const run = promisify(execFile);

/** The design's failure rule: the pod serves its own traffic again within this long. */
export const RECOVERY_BUDGET_MS = 2000;

/** One busy loop per core, at the tests' own priority: a node whose CPUs are all taken. The function stops them. */
export function hogEveryCore(): () => void {
  const hogs: ChildProcess[] = [];
  for (let i = 0; i < availableParallelism(); i++)
    hogs.push(spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }));
  return () => {
    for (const hog of hogs) hog.kill('SIGKILL');
  };
}

export interface Env {
  cluster: Cluster;
  core: CoreV1Api;
  apps: AppsV1Api;
}

/** A pod that serves: running, with an IP, Ready, and not being deleted. */
function isServing(pod: V1Pod): boolean {
  return (
    !pod.metadata?.deletionTimestamp && pod.status?.phase === 'Running' && Boolean(pod.status?.podIP) && isReady(pod)
  );
}

/** A Deployment of devop.test/http-echo on :8080 with `replicas` pods; waits until that many are Ready. */
export async function deployReplicas(env: Env, name: string, replicas: number): Promise<V1Pod[]> {
  await env.apps.createNamespacedDeployment({
    namespace: 'default',
    body: {
      metadata: { name },
      spec: {
        replicas,
        selector: { matchLabels: { app: name } },
        template: {
          metadata: { labels: { app: name } },
          spec: {
            containers: [
              {
                name: 'echo',
                image: 'devop.test/http-echo',
                ports: [{ containerPort: 8080 }],
                env: [{ name: 'PORT', value: '8080' }],
                readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 },
              },
            ],
          },
        },
      },
    },
  });
  return readyPods(env, name, replicas);
}

export async function readyPods(env: Env, app: string, count: number, exclude: string[] = []): Promise<V1Pod[]> {
  return waitFor(`${count} Ready pods of ${app}`, async () => {
    const pods = (await env.core.listNamespacedPod({ namespace: 'default', labelSelector: `app=${app}` })).items
      .filter(isServing)
      .filter((p) => !exclude.includes(p.metadata?.name ?? ''));
    return pods.length >= count ? pods.slice(0, count) : undefined;
  });
}

/** The main PID of a pod's first container (its netns is the pod's). */
export async function podPid(pod: V1Pod): Promise<number> {
  const id = pod.status?.containerStatuses?.[0]?.containerID ?? '';
  return waitFor(`a process of pod ${pod.metadata?.name}`, async () => (await pidsOfContainer(id))[0]);
}

/**
 * Every devop rule in the pod's netns, wherever an agent may put it: iptables and ip6tables lines (nft and legacy
 * backends; the fallback writes one chain per IP family) that mention DEVOP, and every line of an nftables table named
 * devop_* (the agent's owned table). Empty means clean.
 */
export async function devopRules(pid: number): Promise<string[]> {
  const lines: string[] = [];
  const saves = ['iptables-nft-save', 'iptables-legacy-save', 'ip6tables-nft-save', 'ip6tables-legacy-save'];
  for (const save of saves) {
    try {
      const { stdout } = await run('nsenter', ['-t', String(pid), '-n', save, '-t', 'nat']);
      lines.push(...stdout.split('\n').filter((l) => l.includes('DEVOP')));
    } catch {
      // that backend is not installed
    }
  }
  // nft is installed wherever the tests run (scripts/setup.sh): a failure here must fail the check, not hide a table.
  const { stdout } = await run('nsenter', ['-t', String(pid), '-n', 'nft', 'list', 'ruleset']);
  let inTable = false;
  for (const line of stdout.split('\n')) {
    if (/^table \S+ devop_/.test(line)) inTable = true;
    if (inTable) lines.push(line);
    if (line.startsWith('}')) inTable = false;
  }
  return lines;
}

/** The agent pods (Job mode) serving a target pod. */
export async function agentPods(env: Env, targetPod: string): Promise<V1Pod[]> {
  const list = await env.core.listNamespacedPod({
    namespace: 'default',
    labelSelector: `${AGENT_LABELS.name}=${AGENT_LABELS.nameValue},${AGENT_LABELS.targetPod}=${targetPod}`,
  });
  return list.items.filter((p) => p.status?.phase === 'Running' && !p.metadata?.deletionTimestamp);
}

/** PIDs of the agent's node processes (not its guard shell) in an agent pod. */
export async function agentNodePids(pod: V1Pod): Promise<number[]> {
  const id = pod.status?.containerStatuses?.[0]?.containerID ?? '';
  const pids = await pidsOfContainer(id);
  const out: number[] = [];
  for (const pid of pids) {
    const cmd = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (cmd.includes('agent.js')) out.push(pid);
  }
  return out;
}

/** Resident set size of a process, in bytes (0 once it is gone). */
export async function rssBytes(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const m = /^VmRSS:\s+(\d+) kB/m.exec(status);
  return m ? Number(m[1]) * 1024 : 0;
}

/**
 * Polls `who()` until it answers `expected`, as fast as a request round trip allows; returns the milliseconds since
 * `since`. Failed requests count as not recovered. Past the recovery budget it prints each probe (when it started
 * after `since`, how long it took, what answered or why it failed), so a slow recovery shows where the time went.
 */
export async function recoveredAfter(
  since: number,
  who: () => Promise<string>,
  expected: string,
  timeoutMs = 15_000,
): Promise<number> {
  let at = 0;
  const probes: string[] = [];
  try {
    await waitFor(
      `"${expected}" to answer`,
      async () => {
        const started = Date.now();
        const answer = await who().catch((err: Error) => `error: ${err.message}`);
        probes.push(`+${started - since} ms, ${Date.now() - started} ms: ${answer}`);
        if (answer !== expected) return undefined;
        at = Date.now();
        return true;
      },
      timeoutMs,
    );
  } finally {
    if (!at || at - since > RECOVERY_BUDGET_MS) console.log(`probes after the fault:\n  ${probes.join('\n  ')}`);
  }
  return at - since;
}

/**
 * Milliseconds from `since` until `who()` first answers `expected` on a new connection: one is started every 100 ms
 * (each may take up to its own timeout) until one is answered so. For a fault after which connections the session
 * already took may wait with it (a stalled tunnel), while new ones must reach the pod.
 */
export async function firstAnswerAfter(
  since: number,
  who: () => Promise<string>,
  expected: string,
  timeoutMs = 15_000,
): Promise<number> {
  let at = 0;
  const probes: Promise<void>[] = [];
  while (at === 0 && Date.now() - since < timeoutMs) {
    probes.push(
      who().then(
        (answer) => {
          if (answer === expected && at === 0) at = Date.now();
        },
        () => undefined,
      ),
    );
    await new Promise((r) => setTimeout(r, 100));
  }
  await Promise.all(probes);
  if (at === 0) throw new Error(`"${expected}" did not answer a new connection within ${timeoutMs} ms`);
  return at - since;
}

/** PIDs of the stand-in's dial relays (port-forward's way into a pod) in the netns of process `podPid`. */
export async function dialRelayPids(podPid: number): Promise<number[]> {
  const { readdir, readlink } = await import('node:fs/promises');
  const netns = await readlink(`/proc/${podPid}/ns/net`);
  const out: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cmd = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (!cmd.includes('dial-relay.mjs')) continue;
    if ((await readlink(`/proc/${entry}/ns/net`).catch(() => '')) === netns) out.push(Number(entry));
  }
  return out;
}
