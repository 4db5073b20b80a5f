// The agent's redirect rules in an nftables table with `flags owner`: the kernel ties such a table to the netlink
// socket of the process that created it and deletes it the moment that process dies — however it dies. One long-lived
// `nft -i` child (stdin: a pipe from the agent) creates the table and makes every change, so the rules live exactly as
// long as the agent: the agent dies → nft reads EOF and exits → the kernel drops the table; the container's cgroup is
// killed → nft dies too → the kernel drops the table. No cleanup process is needed.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import type { AgentLog } from './log.js';

/** nftables table names of agents: devop_<agentId> (family ip). */
export const TABLE_PREFIX = 'devop_';
export function tableName(agentId: string): string {
  return `${TABLE_PREFIX}${agentId}`;
}

/** How the agent runs nft: in its own netns (the pod's), stderr merged into stdout. */
export const NFT_COMMAND: readonly string[] = ['sh', '-c', 'exec nft -e -a -i 2>&1'];

/** A table nobody creates: listing it fails with a known error that marks the end of each request's output. */
const SENTINEL = 'devop_end_';
/** The nat chain runs at dstnat - 1, before the pod's own nat rules (kube-proxy, CNI, sidecars) at dstnat. */
const PRIORITY = -101;

/** The commands that create the owned table and its prerouting nat chain. */
export function createTableCommands(table: string): string {
  return (
    `add table ip ${table} { flags owner; }; add chain ip ${table} pre { type nat hook prerouting priority ` +
    `${PRIORITY}; policy accept; }`
  );
}

/** One stolen port: redirect to the agent's listener, skipping the node's IP (kubelet probes) unless asked. */
export function redirectCommand(table: string, port: number, listenerPort: number, skipSource?: string): string {
  // The words go to nft's command line: anything but an IPv4 address (e.g. a newline) must not reach it.
  if (skipSource !== undefined && !/^\d{1,3}(\.\d{1,3}){3}$/.test(skipSource))
    throw new Error(`not an IPv4 address: ${JSON.stringify(skipSource)}`);
  const skip = skipSource ? `ip saddr != ${skipSource} ` : '';
  return `add rule ip ${table} pre ${skip}tcp dport ${port} redirect to :${listenerPort} comment "devop ${port}"`;
}

/** The rule handle nft echoes (`-e -a`) for an added rule. */
export function echoedHandle(output: string): number | undefined {
  const m = /^add rule .* # handle (\d+)$/m.exec(output);
  return m ? Number(m[1]) : undefined;
}

/**
 * Splits what nft printed for one request from the sentinel that follows it. Returns undefined while the sentinel's
 * error (three lines: message, the command, the caret line) has not arrived in full.
 */
export function takeResponse(buffer: string, seq: number): { output: string; rest: string } | undefined {
  const m = new RegExp(`(^|\\n)Error:[^\\n]*\\nlist table ip ${SENTINEL}${seq}\\n[^\\n]*\\n`).exec(buffer);
  if (!m) return undefined;
  return { output: buffer.slice(0, m.index + m[1].length), rest: buffer.slice(m.index + m[0].length) };
}

/** The error lines of a response (nft prints `Error: …`, the command, and a caret line under the culprit). */
export function responseError(output: string): string | undefined {
  const lines = output.split('\n');
  const at = lines.findIndex((l) => l.startsWith('Error:'));
  return at < 0 ? undefined : lines.slice(at, at + 2).join(' — ');
}

/**
 * How long one nft transaction may take. nft answers in milliseconds; one that does not (it cannot reach netfilter and
 * keeps printing errors without the sentinel's, as without CAP_NET_ADMIN) is stopped, which removes its table.
 */
const NFT_ANSWER_TIMEOUT_MS = 10_000;

/**
 * A running `nft -i`: one request at a time, each followed by the sentinel so the agent knows when and how it ended.
 */
export class NftShell {
  private buffer = '';
  private seq = 0;
  private queue: Promise<unknown> = Promise.resolve();
  private waiting: { seq: number; resolve: (out: string) => void; reject: (err: Error) => void } | undefined;
  private exitError: Error | undefined;
  private closed = false;

  private constructor(
    private readonly child: ChildProcessWithoutNullStreams,
    private readonly log: AgentLog,
  ) {
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      this.buffer += chunk;
      this.settle();
    });
    child.stdin.on('error', () => undefined); // nft died: reported by 'exit'
    const gone = (why: string): void => {
      if (this.exitError) return;
      if (!this.closed)
        log.warn('the nft process that owns the redirect rules ended: stolen ports go back to the pod', { why });
      this.exitError = new Error(`the nft process ended (${why}); the kernel removed the owned table with it`);
      this.waiting?.reject(this.exitError);
      this.waiting = undefined;
    };
    child.on('error', (err) => gone(err.message));
    child.on('exit', (code, signal) => gone(signal ?? `exit code ${code}`));
  }

  /**
   * Starts `nft -e -a -i` (echo changes with their handles) with stderr merged into stdout: one stream keeps errors in
   * order with the sentinel. `command` lets tests run it in a netns of their own.
   */
  static start(log: AgentLog, command: readonly string[] = NFT_COMMAND): NftShell {
    const [file, ...args] = command;
    const child = spawn(file, args, { stdio: ['pipe', 'pipe', 'ignore'] }) as unknown as ChildProcessWithoutNullStreams;
    return new NftShell(child, log);
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get alive(): boolean {
    return this.exitError === undefined && !this.closed;
  }

  private settle(): void {
    if (!this.waiting) return;
    const got = takeResponse(this.buffer, this.waiting.seq);
    if (!got) return;
    this.buffer = got.rest;
    const { resolve } = this.waiting;
    this.waiting = undefined;
    resolve(got.output);
  }

  /** Sends one line of commands (one nft transaction); resolves with nft's output, rejects with its error. */
  request(commands: string): Promise<string> {
    const job = async (): Promise<string> => {
      if (this.exitError) throw this.exitError;
      if (this.closed) throw new Error('the nft process was closed');
      const seq = ++this.seq;
      let timer: NodeJS.Timeout | undefined;
      const output = await new Promise<string>((resolve, reject) => {
        this.waiting = { seq, resolve, reject };
        timer = setTimeout(() => {
          const said = this.buffer.trim().split('\n').slice(-2).join(' — ');
          this.exitError = new Error(
            `nft did not answer within ${NFT_ANSWER_TIMEOUT_MS / 1000} s${said ? `: ${said}` : ''}`,
          );
          this.waiting = undefined;
          this.child.kill('SIGKILL');
          reject(this.exitError);
        }, NFT_ANSWER_TIMEOUT_MS);
        this.child.stdin.write(`${commands}\nlist table ip ${SENTINEL}${seq}\n`);
        this.settle();
      }).finally(() => clearTimeout(timer));
      const error = responseError(output);
      if (error) throw new Error(`nft: ${error}`);
      this.log.debug('nft', { commands, output: output.trim() });
      return output;
    };
    const next = this.queue.then(job, job);
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Closes nft's stdin: it exits, and the kernel drops the tables it owns. */
  close(): void {
    this.closed = true;
    this.child.stdin.end();
  }
}

/**
 * Whether this netns can hold an owned table (nft present and new enough, kernel >= 5.12): creates a throwaway one with
 * a short-lived nft, whose exit removes it. Resolves undefined when it can, else with the reason.
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
  private readonly handles = new Map<string, number>();

  private constructor(
    private readonly nft: NftShell,
    agentId: string,
    private readonly log: AgentLog,
  ) {
    this.table = tableName(agentId);
  }

  get name(): string {
    return `ip ${this.table}`;
  }

  /** PID of the `nft` process that owns the table. */
  get nftPid(): number | undefined {
    return this.nft.pid;
  }

  /**
   * Creates the owned table and its chain through a new `nft -i`; this is also the probe: it throws when nft is
   * missing, too old for `flags owner`, or the kernel (< 5.12) refuses the flag — the caller then falls back to
   * iptables.
   */
  static async create(agentId: string, log: AgentLog, command?: readonly string[]): Promise<OwnedTable> {
    const nft = NftShell.start(log, command);
    const owned = new OwnedTable(nft, agentId, log);
    try {
      await nft.request(createTableCommands(owned.table));
      const listed = await nft.request(`list table ip ${owned.table}`);
      if (!/^\s*flags owner\b/m.test(listed)) throw new Error('the kernel did not keep the owner flag on the table');
    } catch (err) {
      nft.close();
      throw err;
    }
    log.debug('owned nft table created', { table: owned.table, nftPid: nft.pid });
    return owned;
  }

  private key(port: number, listenerPort: number, skipSource?: string): string {
    return `${port}/${listenerPort}/${skipSource ?? ''}`;
  }

  async addRedirect(port: number, listenerPort: number, skipSource?: string): Promise<void> {
    const output = await this.nft.request(redirectCommand(this.table, port, listenerPort, skipSource));
    const handle = echoedHandle(output);
    if (handle === undefined) throw new Error(`nft did not echo the rule's handle: ${output.trim()}`);
    this.handles.set(this.key(port, listenerPort, skipSource), handle);
  }

  async removeRedirect(port: number, listenerPort: number, skipSource?: string): Promise<void> {
    const key = this.key(port, listenerPort, skipSource);
    const handle = this.handles.get(key);
    if (handle === undefined) return;
    this.handles.delete(key);
    await this.nft.request(`delete rule ip ${this.table} pre handle ${handle}`);
  }

  /** Deletes the table and ends nft (idempotent; with nft gone the kernel has already dropped the table). */
  async remove(): Promise<void> {
    this.handles.clear();
    if (this.nft.alive) {
      await this.nft
        .request(`delete table ip ${this.table}`)
        .catch((err: Error) => this.log.debug('nft table delete', { error: err.message }));
    }
    this.nft.close();
  }
}
