// The agent's redirect rules in an nftables table with `flags owner`: the kernel ties such a table to the netlink
// socket of the process that created it and deletes it the moment that process dies — however it dies. One long-lived
// child, devop-nft (agent/native/nft-owner.c; stdin: a pipe from the agent), creates the table and makes every change,
// so the rules (redirects, and the guards that keep the agent's listeners to redirected connections) live exactly as
// long as the agent: the agent dies → devop-nft reads EOF (or gets its parent-death signal) and exits → the kernel
// drops the table; the container's cgroup is killed → devop-nft dies too → the kernel drops the table. No cleanup
// process is needed.
import { randomBytes } from 'node:crypto';
import { isIP } from 'node:net';
import { dirname, join } from 'node:path';
import { LineChild } from './line-child.js';
import type { AgentLog } from '../log.js';

/** nftables table names of agents: devop_<agentId> (family inet: IPv4 and IPv6). */
export const TABLE_PREFIX = 'devop_';
export function tableName(agentId: string): string {
  return `${TABLE_PREFIX}${agentId}`;
}

/** The table's owner: next to the agent's bundle (/opt/devop in the image, dist/ in a checkout). */
export function nftOwnerProgram(): string {
  return join(dirname(process.argv[1] ?? '.'), 'devop-nft');
}

/**
 * One stolen port, both families: devop-nft's request for `tcp dport PORT redirect to :TO`, or with a source to skip
 * (IPv4 or IPv6) `ip saddr != SKIP …` plus the other family's rule.
 */
export function redirectRequest(port: number, listenerPort: number, skipSource?: string): string {
  // The words go to devop-nft's request line: anything but an IP address (e.g. a newline) must not reach it.
  if (skipSource !== undefined && isIP(skipSource) === 0)
    throw new Error(`not an IP address: ${JSON.stringify(skipSource)}`);
  return `add ${port} ${listenerPort}${skipSource ? ` ${skipSource}` : ''}`;
}

/** A running devop-nft: one request at a time, one answer line each (`ok [value]` or `error why`). */
export class NftOwner {
  private constructor(private readonly helper: LineChild) {}

  /** Starts devop-nft; `command` lets tests run it in a netns of their own (or run something else). */
  static start(log: AgentLog, command: readonly string[] = [nftOwnerProgram()]): NftOwner {
    const helper = LineChild.start(command, {
      name: 'devop-nft',
      log,
      stderr: 'ignore',
      goneMeans: 'the kernel removed the owned table with it',
      onGone: (why) =>
        log.error('devop-nft, which owns the redirect rules, ended: stolen ports go back to the pod', { why }),
    });
    return new NftOwner(helper);
  }

  get pid(): number | undefined {
    return this.helper.pid;
  }

  get alive(): boolean {
    return this.helper.alive;
  }

  /** Sends one request; resolves with what follows `ok` (a rule's handle, or ''), rejects with devop-nft's error. */
  request(line: string): Promise<string> {
    return this.helper.request(line);
  }

  /** Closes devop-nft's stdin: it exits, and the kernel drops the table it owns. */
  close(): void {
    this.helper.close();
  }
}

/**
 * Whether this netns can hold an owned table (devop-nft present, kernel >= 5.12): creates a throwaway one with a
 * short-lived devop-nft, whose exit removes it. Resolves undefined when it can, else with the reason.
 */
export async function probeOwnedTables(log: AgentLog, command?: readonly string[]): Promise<string | undefined> {
  try {
    const probe = await OwnedTable.create(`probe${randomBytes(4).toString('hex')}`, log, command);
    await probe.remove();
    return undefined;
  } catch (err) {
    return (err as Error).message;
  }
}

/** The agent's redirect rules in its owned table (same interface as the iptables chain). */
export class OwnedTable {
  readonly kind = 'nft-owned';
  readonly table: string;
  private readonly handles = new Map<string, string>();
  /** Guard rules by listener port. */
  private readonly guards = new Map<number, string>();

  private constructor(
    private readonly nft: NftOwner,
    agentId: string,
    private readonly log: AgentLog,
  ) {
    this.table = tableName(agentId);
  }

  get name(): string {
    return `inet ${this.table}`;
  }

  /** PID of the devop-nft process that owns the table. */
  get ownerPid(): number | undefined {
    return this.nft.pid;
  }

  /**
   * Creates the owned table and its chain through a new devop-nft; this is also the probe: it throws when devop-nft
   * is missing or the kernel (< 5.12) refuses the flag — the caller then falls back to iptables.
   */
  static async create(agentId: string, log: AgentLog, command?: readonly string[]): Promise<OwnedTable> {
    const nft = NftOwner.start(log, command);
    const owned = new OwnedTable(nft, agentId, log);
    try {
      await nft.request(`table ${owned.table}`);
    } catch (err) {
      nft.close();
      throw err;
    }
    log.debug('owned nft table created', { table: owned.table, ownerPid: nft.pid });
    return owned;
  }

  private key(port: number, listenerPort: number, skipSource?: string): string {
    return `${port}/${listenerPort}/${skipSource ?? ''}`;
  }

  async addRedirect(port: number, listenerPort: number, skipSource?: string): Promise<void> {
    const handle = await this.nft.request(redirectRequest(port, listenerPort, skipSource));
    this.handles.set(this.key(port, listenerPort, skipSource), handle);
  }

  async removeRedirect(port: number, listenerPort: number, skipSource?: string): Promise<void> {
    const key = this.key(port, listenerPort, skipSource);
    const handle = this.handles.get(key);
    if (handle === undefined) return;
    this.handles.delete(key);
    await this.nft.request(`delete ${handle}`);
  }

  /**
   * Has devop-nft, once the agent is gone, wait (bounded) for process `pid` to end before it ends itself and the
   * kernel drops the table: devop-splice's redirected connections need the table's NAT for their ends to reach their
   * clients, and both get the agent's parent-death signal at once.
   */
  async outlive(pid: number): Promise<void> {
    await this.nft.request(`outlive ${pid}`);
  }

  /**
   * Lets listener port `listenerPort` take only the connections a redirect rule sent there: one made to that port
   * directly (from the pod network, or from a process of the pod) is reset. The listeners bind every address of the
   * netns, since a redirect delivers to the primary address of the interface the connection came in on.
   */
  async guardListener(listenerPort: number): Promise<void> {
    if (this.guards.has(listenerPort)) return;
    this.guards.set(listenerPort, await this.nft.request(`guard ${listenerPort}`));
  }

  /** Removes the guard of a listener that closed (its port may be anyone's again). */
  async unguardListener(listenerPort: number): Promise<void> {
    const handle = this.guards.get(listenerPort);
    if (handle === undefined) return;
    this.guards.delete(listenerPort);
    await this.nft.request(`unguard ${handle}`);
  }

  /** Deletes the table and ends devop-nft (idempotent; with it gone the kernel has already dropped the table). */
  async remove(): Promise<void> {
    this.handles.clear();
    this.guards.clear();
    if (this.nft.alive) {
      await this.nft.request('drop').catch((err: Error) => this.log.debug('nft table delete', { error: err.message }));
    }
    this.nft.close();
  }
}
