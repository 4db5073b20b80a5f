// Clean-up of stand-in nodes whose process died without stop() (a killed test run): everything named after their
// instance — containers, tasks, snapshots and cgroups in containerd, netns, links, iptables chains, /etc/netns files,
// state, its certificates' and kubeconfigs' directory — is removed.
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { removeInstanceContainers } from './containerd.js';
import { run, runQuiet } from './host.js';
import { linkTag, pidAlive, removeInstanceChains, SUBNET_LOCK_DIR } from './network.js';

/** Removes what a dead instance left; safe to call for an instance that left nothing. */
export async function removeInstanceLeftovers(instance: string): Promise<void> {
  const tag = linkTag(instance);
  await removeInstanceContainers(instance);
  const netns = (await run('ip', ['netns', 'list']))
    .split('\n')
    .map((l) => l.split(' ')[0])
    .filter((n) => n.startsWith(`dvk-${instance}-`));
  for (const name of netns) {
    await runQuiet('ip', ['netns', 'del', name]);
    rmSync(join('/etc/netns', name), { recursive: true, force: true });
  }
  for (const line of (await run('ip', ['-o', 'link'])).split('\n')) {
    const m = /^\d+: ([^:@]+)/.exec(line);
    if (m && (m[1] === `dvb${tag}` || m[1].startsWith(`dvv${tag}`))) await runQuiet('ip', ['link', 'del', m[1]]);
  }
  await removeInstanceChains(tag);
  rmSync(join('/run/devop-kubelet', instance), { recursive: true, force: true });
  rmSync(join('/var/lib/devop-kubelet', instance), { recursive: true, force: true });
  for (const dir of clusterDirs(instance)) rmSync(dir, { recursive: true, force: true });
}

/** The directories a cluster makes for its certificates and kubeconfigs (standin/index.ts: mkdtemp). */
export function clusterDirs(instance: string): string[] {
  return readdirSync(tmpdir())
    .filter((name) => name.startsWith(`devop-cluster-${instance}-`))
    .map((name) => join(tmpdir(), name));
}

/** Finds subnet reservations whose owner process is gone and removes their instance's leftovers and the reservation. */
export async function cleanStaleInstances(): Promise<string[]> {
  if (!existsSync(SUBNET_LOCK_DIR)) return [];
  const cleaned: string[] = [];
  for (const prefix of readdirSync(SUBNET_LOCK_DIR)) {
    const lock = join(SUBNET_LOCK_DIR, prefix);
    const [pid, instance] = readFileSync(lock, 'utf8').trim().split(' ');
    if (!instance || pidAlive(Number(pid))) continue;
    await removeInstanceLeftovers(instance);
    rmSync(lock, { force: true });
    cleaned.push(instance);
  }
  return cleaned;
}
