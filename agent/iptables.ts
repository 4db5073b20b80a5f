// The agent's redirect rules: backend detection (an owned nft table when the kernel allows it, else iptables nft
// vs legacy), the owned table (agent/nft-owned.ts) or one DEVOP-<id> chain jumped to from PREROUTING with one REDIRECT
// per stolen port, and the removal of stale chains whose agent is gone.
import { connect } from 'node:net';
import { CHAIN_PREFIX, chainName } from '../shared/agent-contract.js';
import { run, runOk } from './exec.js';
import { createLog, type AgentLog } from './log.js';
import { OwnedTable, probeOwnedTables } from './nft-owned.js';

/**
 * nft-owned: the agent's own nftables table, which the kernel removes when the agent dies; nft/legacy: iptables +
 * guard.
 */
export type IptablesBackend = 'nft-owned' | ChainBackend;
/** The iptables fallback's backends. */
export type ChainBackend = 'nft' | 'legacy';

export function iptablesBinary(backend: ChainBackend): string {
  return backend === 'nft' ? 'iptables-nft' : 'iptables-legacy';
}

/**
 * An owned nft table when this netns allows one (devop-nft present, kernel >= 5.12); else counts the rules each
 * iptables backend holds in this netns and picks the one the pod already uses (default nft).
 */
export async function detectBackend(log: AgentLog): Promise<IptablesBackend> {
  const refused = await probeOwnedTables(log);
  if (refused === undefined) {
    log.info('redirect rules: owned nft table (the kernel removes it when the agent dies)');
    return 'nft-owned';
  }
  log.warn('no owned nft table (needs devop-nft and kernel >= 5.12); using iptables with a guard process', {
    reason: refused,
  });
  const count = async (backend: ChainBackend): Promise<number> => {
    try {
      const res = await run(`${iptablesBinary(backend)}-save`, []);
      return res.code === 0 ? res.stdout.split('\n').filter((l) => l.startsWith('-A ')).length : -1;
    } catch {
      return -1; // that backend is not installed
    }
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

/** The jump from PREROUTING to the agent's chain, as iptables arguments (same words for -I and -D). */
export function jumpRule(chain: string): string[] {
  return ['PREROUTING', '-p', 'tcp', '-m', 'comment', '--comment', 'devop', '-j', chain];
}

/** One stolen port: REDIRECT to the agent's listener, skipping the node's IP (kubelet probes) unless asked. */
export function redirectRule(chain: string, port: number, listenerPort: number, skipSource?: string): string[] {
  const rule = [chain, '-p', 'tcp', '--dport', String(port)];
  if (skipSource) rule.push('!', '-s', skipSource);
  rule.push('-j', 'REDIRECT', '--to-ports', String(listenerPort));
  return rule;
}

/** The shell commands that remove an agent's chain and jump; the guard runs them when the agent dies. */
export function cleanupScript(backend: ChainBackend, chain: string): string {
  const ipt = `${iptablesBinary(backend)} -w -t nat`;
  const jump = jumpRule(chain).join(' ');
  // -D removes one copy per call: loop until none is left, then empty and delete the chain.
  return (
    `while ${ipt} -D ${jump} 2>/dev/null; do :; done; ${ipt} -F ${chain} 2>/dev/null; ${ipt} -X ${chain} ` +
    `2>/dev/null; true`
  );
}

export class AgentChain {
  readonly chain: string;
  private created = false;
  /** With the nft-owned backend: the owned table, created on the first redirect. */
  private owned: Promise<OwnedTable> | undefined;

  constructor(
    readonly backend: IptablesBackend,
    private readonly agentId: string,
    private readonly log: AgentLog = createLog('info'),
  ) {
    this.chain = chainName(agentId);
  }

  private ipt(args: readonly string[]): Promise<string> {
    return runOk(iptablesBinary(this.backend as ChainBackend), ['-w', '-t', 'nat', ...args]);
  }

  private table(): Promise<OwnedTable> {
    this.owned ??= OwnedTable.create(this.agentId, this.log);
    // A failed creation is not kept: the next subscribe tries again (and says why it failed).
    this.owned.catch(() => (this.owned = undefined));
    return this.owned;
  }

  /** Creates the chain and the jump (once). */
  async ensure(): Promise<void> {
    if (this.backend === 'nft-owned') {
      await this.table();
      return;
    }
    if (this.created) return;
    await this.ipt(['-N', this.chain]);
    await this.ipt(['-I', ...jumpRule(this.chain).slice(0, 1), '1', ...jumpRule(this.chain).slice(1)]);
    this.created = true;
  }

  async addRedirect(port: number, listenerPort: number, skipSource?: string): Promise<void> {
    if (this.backend === 'nft-owned') return (await this.table()).addRedirect(port, listenerPort, skipSource);
    await this.ensure();
    await this.ipt(['-A', ...redirectRule(this.chain, port, listenerPort, skipSource)]);
  }

  async removeRedirect(port: number, listenerPort: number, skipSource?: string): Promise<void> {
    if (this.backend === 'nft-owned') return (await this.owned)?.removeRedirect(port, listenerPort, skipSource);
    if (!this.created) return;
    await this.ipt(['-D', ...redirectRule(this.chain, port, listenerPort, skipSource)]);
  }

  /**
   * The owned table's guard of a listener port (agent/nft-owned.ts): only redirected connections reach it. The
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

  /** Removes the jump and the chain, or the owned table (idempotent). */
  async remove(): Promise<void> {
    if (this.backend === 'nft-owned') {
      const owned = this.owned;
      this.owned = undefined;
      await (await owned?.catch(() => undefined))?.remove();
      return;
    }
    await run('sh', ['-c', cleanupScript(this.backend, this.chain)]);
    this.created = false;
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

/** Removes DEVOP-* chains (both backends) whose agent no longer holds its liveness socket in this netns. */
export async function removeStaleChains(log: AgentLog, ownAgentId: string): Promise<string[]> {
  const removed: string[] = [];
  for (const backend of ['nft', 'legacy'] as const) {
    let saved: string;
    try {
      const res = await run(`${iptablesBinary(backend)}-save`, ['-t', 'nat']);
      if (res.code !== 0) continue;
      saved = res.stdout;
    } catch {
      continue;
    }
    const chains = [...saved.matchAll(new RegExp(`^:(${CHAIN_PREFIX}([a-z0-9]+)) `, 'gm'))];
    for (const [, chain, id] of chains) {
      // Our own id cannot have a chain yet: one that exists was left by an earlier agent with the same id.
      if (id !== ownAgentId && (await isAlive(id))) continue;
      // Jumps may have been written by another devop version: delete every PREROUTING rule that targets the chain.
      for (const line of saved.split('\n')) {
        if (line.startsWith('-A PREROUTING ') && line.endsWith(`-j ${chain}`)) {
          await run('sh', ['-c', `${iptablesBinary(backend)} -w -t nat -D ${line.slice(3)}`]);
        }
      }
      await run('sh', ['-c', cleanupScript(backend, chain)]);
      log.info('removed stale chain', { chain, backend });
      removed.push(`${backend}:${chain}`);
    }
  }
  return removed;
}
