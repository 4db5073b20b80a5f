// Pod subnet reservation: a free /24 for a new instance's pods (and its twin for ClusterIPs), checked against the
// host's routes and addresses and held with a lock file, after clearing what killed runs left.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { UserError } from '../../shared/errors.js';
import { run } from './host.js';
import { hostHasIPv6, kernelForwardsIPv6PerInterface, pidAlive, SUBNET_LOCK_DIR, type NodeSubnets } from './network.js';
import { cleanStaleInstances } from './stale.js';

/** Pod subnets are 10.<244..250>.<x>.0/24; services get the twin 10.<96..102>.<x>.0/24. */
const FIRST_OCTET2 = 244;
const LAST_OCTET2 = 250;

async function usedPrefixes(): Promise<Set<string>> {
  const used = new Set<string>();
  const routes = JSON.parse(await run('ip', ['-j', 'route', 'show', 'table', 'all'])) as Array<{ dst?: string }>;
  const addrs = JSON.parse(await run('ip', ['-j', 'addr', 'show'])) as Array<{ addr_info?: Array<{ local?: string }> }>;
  const all = [
    ...routes.map((r) => r.dst ?? ''),
    ...addrs.flatMap((a) => (a.addr_info ?? []).map((i) => i.local ?? '')),
  ];
  for (const addr of all) {
    const m = /^10\.(\d+)\.(\d+)\./.exec(addr);
    if (m) used.add(`10.${m[1]}.${m[2]}`);
  }
  return used;
}

/** Picks a free pod /24 (checked against the host's routes and addresses) and reserves it with a lock file. */
export async function reserveSubnets(instance: string): Promise<NodeSubnets> {
  mkdirSync(SUBNET_LOCK_DIR, { recursive: true });
  // A killed run leaves its bridge and reservation behind: clear those first so their subnets become free again.
  await cleanStaleInstances();
  const used = await usedPrefixes();
  for (let o2 = FIRST_OCTET2; o2 <= LAST_OCTET2; o2++) {
    for (let o3 = 0; o3 < 256; o3++) {
      const prefix = `10.${o2}.${o3}`;
      const servicePrefix = `10.${96 + o2 - FIRST_OCTET2}.${o3}`;
      if (used.has(prefix) || used.has(servicePrefix)) continue;
      const lock = join(SUBNET_LOCK_DIR, prefix);
      if (!tryLock(lock, instance)) continue;
      return {
        podCIDR: `${prefix}.0/24`,
        nodeIP: `${prefix}.1`,
        controlPlaneIP: `${prefix}.2`,
        serviceCIDR: `${servicePrefix}.0/24`,
        // Dual-stack as kind's `ipFamily: dual`: the /24's twin among unique-local addresses, free with the /24's lock.
        ...(hostHasIPv6() ? { podCIDR6: `fd00:${o2}:${o3}::/64` } : {}),
        ...(hostHasIPv6() && kernelForwardsIPv6PerInterface() ? { serviceCIDR6: `fd00:${o2}:${o3}:1::/112` } : {}),
        prefix,
        release: () => rmSync(lock, { force: true }),
      };
    }
  }
  throw new UserError(
    'no free pod subnet in 10.244.0.0/24–10.250.255.0/24',
    'stop other stand-in clusters (or remove the routes that use these subnets)',
  );
}

function tryLock(lock: string, instance: string): boolean {
  try {
    writeFileSync(lock, `${process.pid} ${instance}\n`, { flag: 'wx' });
    return true;
  } catch {
    // Held: reclaim it only if its owner is gone (a killed test run).
    try {
      const pid = Number(readFileSync(lock, 'utf8').split(' ')[0]);
      if (pid && pidAlive(pid)) return false;
      rmSync(lock, { force: true });
      writeFileSync(lock, `${process.pid} ${instance}\n`, { flag: 'wx' });
      return true;
    } catch {
      return false;
    }
  }
}
