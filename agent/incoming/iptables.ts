// The agent's redirect rules: backend detection (an owned nft table when the kernel allows it, else iptables nft vs
// legacy), the owned table (agent/native/nft-owned.ts) or one DEVOP-<id> chain per IP family (iptables and ip6tables)
// jumped to from PREROUTING with one REDIRECT per stolen port, and the removal of stale chains whose agent is gone.
import { readFileSync } from 'node:fs';
import { connect, isIP } from 'node:net';
import { CHAIN_PREFIX, chainName } from '../../shared/agent-contract.js';
import { run, runOk, type RunResult } from './tools.js';
import { createLog, type AgentLog } from '../log.js';
import { OwnedTable, probeOwnedTables } from '../native/nft-owned.js';

/**
 * nft-owned: the agent's own nftables table, which the kernel removes when the agent dies; nft/legacy: iptables +
 * guard.
 */
export type IptablesBackend = 'nft-owned' | ChainBackend;
/** The iptables fallback's backends. */
export type ChainBackend = 'nft' | 'legacy';

/** The fallback's rules are per family: iptables for IPv4 clients, ip6tables for IPv6 ones. */
export type IpFamily = 'ipv4' | 'ipv6';
export const IP_FAMILIES: readonly IpFamily[] = ['ipv4', 'ipv6'];

export function iptablesBinary(backend: ChainBackend, family: IpFamily = 'ipv4'): string {
  return `${family === 'ipv6' ? 'ip6tables' : 'iptables'}-${backend === 'nft' ? 'nft' : 'legacy'}`;
}

/**
 * An owned nft table when this netns allows one (devop-nft present, kernel >= 5.12); else counts the rules each
 * iptables backend holds in this netns and picks the one the pod already uses (default nft).
 */
export async function detectBackend(
  log: AgentLog,
  cleaned: Promise<unknown> = Promise.resolve(),
): Promise<IptablesBackend> {
  const refused = await probeOwnedTables(log);
  // The rules counted below are the pod's own: stale devop chains are gone first.
  await cleaned;
  if (refused === undefined) {
    log.info('redirect rules: owned nft table (the kernel removes it when the agent dies)');
    return 'nft-owned';
  }
  log.warn('no owned nft table (needs devop-nft and kernel >= 5.12); using iptables with a guard process', {
    reason: refused,
  });
  // The rules of both families: an IPv6-only pod's CNI writes ip6tables rules only.
  const countFamily = async (backend: ChainBackend, family: IpFamily): Promise<number> => {
    try {
      const res = await run(`${iptablesBinary(backend, family)}-save`, []);
      return res.code === 0 ? res.stdout.split('\n').filter((l) => l.startsWith('-A ')).length : -1;
    } catch {
      return -1; // that backend is not installed
    }
  };
  const count = async (backend: ChainBackend): Promise<number> => {
    const [v4, v6] = await Promise.all(IP_FAMILIES.map((family) => countFamily(backend, family)));
    return v4 < 0 && v6 < 0 ? -1 : Math.max(v4, 0) + Math.max(v6, 0);
  };
  const [nft, legacy] = await Promise.all([count('nft'), count('legacy')]);
  const backend: ChainBackend = legacy > 0 && nft <= 0 ? 'legacy' : nft < 0 && legacy >= 0 ? 'legacy' : 'nft';
  log.debug('iptables backend', { backend, nftRules: nft, legacyRules: legacy });
  return backend;
}

/**
 * The abstract unix socket an agent holds while it lives; it is per-netns, so it proves liveness across PID namespaces.
 */
export function livenessSocket(agentId: string): string {
  return `\0devop-agent-${agentId}`;
}

/**
 * The jump from PREROUTING to an agent's chain, but the chain (constant words: agent/incoming/chain-guard.ts's script
 * holds them).
 */
export const JUMP_WORDS = ['PREROUTING', '-p', 'tcp', '-m', 'comment', '--comment', 'devop', '-j'] as const;

/** The jump from PREROUTING to the agent's chain, as iptables arguments (same words for -I and -D). */
export function jumpRule(chain: string): string[] {
  return [...JUMP_WORDS, chain];
}

/** One stolen port: REDIRECT to the agent's listener, skipping the node's IP (kubelet probes) unless asked. */
export function redirectRule(chain: string, port: number, listenerPort: number, skipSource?: string): string[] {
  const rule = [chain, '-p', 'tcp', '--dport', String(port)];
  if (skipSource) rule.push('!', '-s', skipSource);
  rule.push('-j', 'REDIRECT', '--to-ports', String(listenerPort));
  return rule;
}

/** A chain of ours: the prefix and an agent id's letters and digits, within iptables' 28-character limit. */
const OWN_CHAIN = new RegExp(`^${CHAIN_PREFIX}[a-z0-9]{1,${28 - CHAIN_PREFIX.length}}$`);

export function isOwnChain(name: string): boolean {
  return OWN_CHAIN.test(name);
}

/**
 * Bound on the deletions of one chain's jumps: -D removes one copy per call, and a netns may hold several copies
 * (agents of other versions); a bound, so that rules added as fast as they are removed cannot keep an agent here.
 */
const MAX_JUMP_DELETIONS = 64;

/**
 * Removes an agent's chain and every PREROUTING rule that jumps to it, with iptables run directly (no shell): rule
 * numbers, read from `iptables -S PREROUTING`, are the only thing taken from the netns, so no text a pod could write
 * (a rule's comment, an interface name) ever becomes a command or an argument.
 */
export async function removeChain(backend: ChainBackend, chain: string, family: IpFamily = 'ipv4'): Promise<void> {
  if (!isOwnChain(chain)) throw new Error(`refusing to remove "${chain}": not a devop chain name`);
  const ipt = (args: readonly string[]): Promise<RunResult> =>
    run(iptablesBinary(backend, family), ['-w', '-t', 'nat', ...args]);
  for (let i = 0; i < MAX_JUMP_DELETIONS; i++) {
    const listed = await ipt(['-S', 'PREROUTING']);
    if (listed.code !== 0) break;
    const number = jumpRuleNumber(listed.stdout, chain);
    if (number === undefined) break;
    if ((await ipt(['-D', 'PREROUTING', String(number)])).code !== 0) break;
  }
  await ipt(['-F', chain]);
  await ipt(['-X', chain]);
}

/**
 * The number of the last PREROUTING rule that jumps to `chain`, in `iptables -S PREROUTING` output (whose rule lines
 * are in rule order, after the policy line). A rule's own text can only make a rule of its own look like a jump (its
 * comment is quoted, so a line whose comment ends with the chain ends with a quote): such a rule is removed too.
 */
export function jumpRuleNumber(listing: string, chain: string): number | undefined {
  const rules = listing.split('\n').filter((line) => line.startsWith('-A PREROUTING '));
  for (let i = rules.length - 1; i >= 0; i--) if (rules[i].endsWith(` -j ${chain}`)) return i + 1;
  return undefined;
}

/** The source a family's rule skips: the node's address when it is of that family (a rule matches one family). */
export function skipFor(family: IpFamily, skipSource: string | undefined): string | undefined {
  return skipSource !== undefined && isIP(skipSource) === (family === 'ipv6' ? 6 : 4) ? skipSource : undefined;
}

export class AgentChain {
  readonly chain: string;
  /** With the iptables fallback: the families whose chain and jump exist (ensure() makes them). */
  private families: IpFamily[] | undefined;
  /** With the nft-owned backend: the owned table, created on the first redirect. */
  private owned: Promise<OwnedTable> | undefined;

  constructor(
    readonly backend: IptablesBackend,
    private readonly agentId: string,
    private readonly log: AgentLog = createLog('info'),
  ) {
    this.chain = chainName(agentId);
  }

  private ipt(family: IpFamily, args: readonly string[]): Promise<string> {
    return runOk(iptablesBinary(this.backend as ChainBackend, family), ['-w', '-t', 'nat', ...args]);
  }

  /**
   * Processes the owned table must outlive (devop-splice): told to its devop-nft when the table is made. Without one
   * it is merely not waited for (its connections then may not learn that the agent died; a warning says so).
   */
  readonly outlives: number[] = [];

  private table(): Promise<OwnedTable> {
    this.owned ??= OwnedTable.create(this.agentId, this.log).then(async (owned) => {
      for (const pid of this.outlives) {
        await owned
          .outlive(pid)
          .catch((err: Error) =>
            this.log.warn('the redirect table may not outlive devop-splice', { error: err.message }),
          );
      }
      return owned;
    });
    // A failed creation is not kept: the next subscribe tries again (and says why it failed).
    this.owned.catch(() => (this.owned = undefined));
    return this.owned;
  }

  /**
   * Creates the chain and the jump (once) in each family. A family whose nat table cannot be used (no ip6tables, a
   * kernel without IPv6 NAT) is left out with a warning: its clients are not stolen. Throws when neither can be.
   */
  async ensure(): Promise<void> {
    if (this.backend === 'nft-owned') {
      await this.table();
      return;
    }
    if (this.families) return;
    const made: IpFamily[] = [];
    const failures: string[] = [];
    for (const family of IP_FAMILIES) {
      try {
        await this.ipt(family, ['-N', this.chain]);
        await this.ipt(family, ['-I', ...jumpRule(this.chain).slice(0, 1), '1', ...jumpRule(this.chain).slice(1)]);
        made.push(family);
      } catch (err) {
        failures.push((err as Error).message);
        await removeChain(this.backend as ChainBackend, this.chain, family).catch(() => undefined); // half made
      }
    }
    if (made.length === 0) throw new Error(failures.join('; '));
    if (failures.length > 0) {
      const missing = made.includes('ipv4') ? 'IPv6' : 'IPv4';
      this.log.warn(`the iptables fallback has no ${missing} rules: ${missing} clients go to the pod`, {
        error: failures.join('; '),
      });
    }
    this.families = made;
  }

  async addRedirect(port: number, listenerPort: number, skipSource?: string): Promise<void> {
    if (this.backend === 'nft-owned') return (await this.table()).addRedirect(port, listenerPort, skipSource);
    await this.ensure();
    const added: IpFamily[] = [];
    try {
      for (const family of this.families ?? []) {
        await this.ipt(family, ['-A', ...redirectRule(this.chain, port, listenerPort, skipFor(family, skipSource))]);
        added.push(family);
      }
    } catch (err) {
      // All families or none: a port half redirected would be stolen from some clients only.
      for (const family of added)
        await this.ipt(family, ['-D', ...redirectRule(this.chain, port, listenerPort, skipFor(family, skipSource))]);
      throw err;
    }
  }

  async removeRedirect(port: number, listenerPort: number, skipSource?: string): Promise<void> {
    if (this.backend === 'nft-owned') return (await this.owned)?.removeRedirect(port, listenerPort, skipSource);
    for (const family of this.families ?? [])
      await this.ipt(family, ['-D', ...redirectRule(this.chain, port, listenerPort, skipFor(family, skipSource))]);
  }

  /**
   * The owned table's guard of a listener port (agent/native/nft-owned.ts): only redirected connections reach it. The
   * iptables fallback (kernels before 5.12) has none: resolves false.
   */
  async guardListener(listenerPort: number): Promise<boolean> {
    if (this.backend !== 'nft-owned') return false;
    await (await this.table()).guardListener(listenerPort);
    return true;
  }

  async unguardListener(listenerPort: number): Promise<void> {
    if (this.backend !== 'nft-owned') return;
    const owned = await this.owned?.catch(() => undefined);
    await owned?.unguardListener(listenerPort);
  }

  /** Removes the jumps and the chains of both families, or the owned table (idempotent). */
  async remove(): Promise<void> {
    if (this.backend === 'nft-owned') {
      const owned = this.owned;
      this.owned = undefined;
      await (await owned?.catch(() => undefined))?.remove();
      return;
    }
    const backend = this.backend;
    for (const family of this.families ?? []) await removeChain(backend, this.chain, family);
    this.families = undefined;
  }
}

function isAlive(agentId: string): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = connect(livenessSocket(agentId));
    sock.once('connect', () => {
      sock.destroy();
      resolve(true);
    });
    sock.once('error', () => resolve(false));
  });
}

/**
 * Whether the legacy (x_tables) nat table of a family exists in this netns: the kernel lists each family's tables in
 * /proc/net/ip_tables_names and ip6_tables_names (absent while its module is not loaded).
 */
function legacyNatTable(family: IpFamily): boolean {
  try {
    const names = readFileSync(`/proc/net/${family === 'ipv6' ? 'ip6' : 'ip'}_tables_names`, 'utf8');
    return names.split('\n').includes('nat');
  } catch {
    return false;
  }
}

/** Removes DEVOP-* chains (both backends, both families) whose agent no longer holds its liveness socket here. */
export async function removeStaleChains(log: AgentLog, ownAgentId: string): Promise<string[]> {
  const removed: string[] = [];
  const backends: readonly ChainBackend[] = ['nft', 'legacy'];
  const tables = backends.flatMap((backend) => IP_FAMILIES.map((family) => ({ backend, family })));
  // The reads at once: they sit on every agent's start, and each is a process of its own. A legacy nat table the
  // kernel does not list for this netns holds no chain: its read is skipped (and makes none).
  const saves = await Promise.all(
    tables.map(({ backend, family }) =>
      (backend === 'legacy' && !legacyNatTable(family)
        ? Promise.resolve(undefined)
        : run(`${iptablesBinary(backend, family)}-save`, ['-t', 'nat'])
      ).then(
        (res) => (res?.code === 0 ? res.stdout : undefined),
        () => undefined, // that program is not installed
      ),
    ),
  );
  for (const [i, { backend, family }] of tables.entries()) {
    const saved = saves[i];
    if (saved === undefined) continue;
    const chains = [...saved.matchAll(new RegExp(`^:(${CHAIN_PREFIX}([a-z0-9]+)) `, 'gm'))];
    for (const [, chain, id] of chains) {
      // Our own id cannot have a chain yet: one that exists was left by an earlier agent with the same id.
      if (id !== ownAgentId && (await isAlive(id))) continue;
      // Jumps may have been written by another devop version: removeChain deletes every PREROUTING rule that
      // targets the chain, whatever its matches.
      await removeChain(backend, chain, family);
      log.info('removed stale chain', { chain, backend, family });
      removed.push(`${iptablesBinary(backend, family)}:${chain}`);
    }
  }
  return removed;
}
