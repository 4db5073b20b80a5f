// Pods of the stand-in for suites: wait for a pod to reach a state, read a container's log or exec output as text, find
// a container's processes, tag or remove an image in the node's containerd.
import type { CoreV1Api, V1Pod } from '@kubernetes/client-node';
import type { Readable } from 'node:stream';
import { ctr, ctrQuiet, type ExecProcess, normalizeImageRef } from '../standin/index.js';

/** Polls until the predicate holds for the pod (generous deadline: the machine may be loaded). */
export async function waitForPod(
  core: CoreV1Api,
  name: string,
  what: string,
  predicate: (pod: V1Pod) => boolean,
  timeoutMs = 30_000,
): Promise<V1Pod> {
  const deadline = Date.now() + timeoutMs;
  let last: V1Pod | undefined;
  for (;;) {
    try {
      last = await core.readNamespacedPod({ namespace: 'default', name });
      if (predicate(last)) return last;
    } catch {
      // not there yet
    }
    if (Date.now() > deadline)
      throw new Error(`pod ${name}: timed out waiting for ${what}; last status: ${JSON.stringify(last?.status)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export function isReady(pod: V1Pod): boolean {
  return pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

/** Everything a stream yields until it ends or closes (an exec's pipes may close without an end). */
export function readAll(stream: Readable): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const done = () => resolve(Buffer.concat(chunks).toString('utf8'));
    stream.on('data', (chunk: Buffer | string) => chunks.push(Buffer.from(chunk)));
    stream.once('end', done);
    stream.once('close', done);
    stream.once('error', reject);
  });
}

export async function execOutput(proc: ExecProcess): Promise<{ stdout: string; stderr: string; exitCode: number }> {
  const [stdout, stderr, { exitCode }] = await Promise.all([readAll(proc.stdout), readAll(proc.stderr), proc.wait()]);
  return { stdout, stderr, exitCode };
}

/** The PIDs whose /proc/<pid>/cgroup mentions the container ID — the way the devop agent finds a container. */
export async function pidsOfContainer(containerID: string): Promise<number[]> {
  const { readdir, readFile } = await import('node:fs/promises');
  const id = containerID.replace(/^containerd:\/\//, '');
  const pids: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cgroup = await readFile(`/proc/${entry}/cgroup`, 'utf8').catch(() => '');
    if (cgroup.includes(id)) pids.push(Number(entry));
  }
  return pids;
}

/** Makes an image containerd already has available under another name (what a push of it would do). */
export async function tagImage(source: string, target: string): Promise<void> {
  await ctr(['images', 'tag', '--force', normalizeImageRef(source), normalizeImageRef(target)]);
}

export async function removeImage(image: string): Promise<void> {
  await ctrQuiet(['images', 'rm', normalizeImageRef(image)]);
}
