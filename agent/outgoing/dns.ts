// DNS as the target pod sees it: its resolv.conf (nameservers, search domains, ndots) and /etc/hosts, read from the
// target container's filesystem (inside its root: agent/files/open-in-target.ts) and queried from the pod's netns.
import { isIP } from 'node:net';
import { readFile } from '../fs-calls.js';
import { readTargetFile } from '../files/open-in-target.js';

export interface ResolvConf {
  nameservers: string[];
  search: string[];
  ndots: number;
}

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

export class DnsError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** Per query and server: short, because the CLI's caller (a DNS lookup in the local command) waits for it. */
const QUERY_TIMEOUT_MS = 2000;

export function parseResolvConf(text: string): ResolvConf {
  const conf: ResolvConf = { nameservers: [], search: [], ndots: 1 };
  for (const raw of text.split('\n')) {
    const line = raw.replace(/[#;].*$/, '').trim();
    const [key, ...values] = line.split(/\s+/);
    if (key === 'nameserver' && values[0]) conf.nameservers.push(values[0]);
    else if (key === 'search' || key === 'domain') conf.search = values.filter(Boolean);
    else if (key === 'options') {
      for (const opt of values) {
        const m = /^ndots:(\d+)$/.exec(opt);
        if (m) conf.ndots = Math.min(15, Number(m[1]));
      }
    }
  }
  return conf;
}

export function parseHosts(text: string): Map<string, ResolvedAddress[]> {
  const hosts = new Map<string, ResolvedAddress[]>();
  for (const raw of text.split('\n')) {
    const [address, ...names] = raw.replace(/#.*$/, '').trim().split(/\s+/);
    const family = isIP(address ?? '');
    if (family === 0) continue;
    for (const name of names) {
      const key = name.toLowerCase();
      hosts.set(key, [...(hosts.get(key) ?? []), { address, family: family as 4 | 6 }]);
    }
  }
  return hosts;
}

/** The names to try for `name`, in order, as glibc's resolver does with search and ndots. */
export function candidates(name: string, conf: ResolvConf): string[] {
  if (name.endsWith('.')) return [name.slice(0, -1)];
  const searched = conf.search.map((domain) => `${name}.${domain}`);
  const dots = name.split('.').length - 1;
  return dots >= conf.ndots ? [name, ...searched] : [...searched, name];
}

/**
 * A file of the target (inside its root, by devop-open), or the agent's own when it runs targetless (then its own pod
 * is the pod); empty when missing or unreadable.
 */
async function readOptional(pid: number | undefined, path: string): Promise<string> {
  try {
    return pid === undefined ? await readFile(path, 'utf8') : await readTargetFile(pid, path);
  } catch {
    return '';
  }
}

/**
 * How long the pod's resolv.conf and hosts, once read, answer lookups: each read of the target's files starts
 * devop-open (a process: 8-15 ms measured on a loaded 2-core node, where a lookup waits for it), and a changed
 * resolv.conf is still seen within this.
 */
const POD_FILES_TTL_MS = 2000;

/**
 * The last read of the pod's DNS files. Module state, bounded: an agent serves one target for its whole life, so this
 * holds one entry; concurrent lookups share one read.
 */
const podFiles = new Map<number | undefined, { at: number; files: Promise<[string, string]> }>();

function readPodFiles(pid: number | undefined): Promise<[string, string]> {
  const cached = podFiles.get(pid);
  if (cached && Date.now() - cached.at < POD_FILES_TTL_MS) return cached.files;
  podFiles.clear();
  const files = Promise.all([readOptional(pid, '/etc/resolv.conf'), readOptional(pid, '/etc/hosts')]);
  podFiles.set(pid, { at: Date.now(), files });
  return files;
}

/** The pod's nameservers (its resolv.conf, as read at most POD_FILES_TTL_MS ago); empty when it names none. */
export async function podNameservers(pid: number | undefined): Promise<string[]> {
  const [confText] = await readPodFiles(pid);
  return parseResolvConf(confText).nameservers;
}

/** Resolves a name for a session, with the pod's resolv.conf and hosts as read at most POD_FILES_TTL_MS ago. */
export async function resolveInPod(pid: number | undefined, name: string, family?: 4 | 6): Promise<ResolvedAddress[]> {
  const literal = isIP(name);
  if (literal !== 0) return [{ address: name, family: literal as 4 | 6 }];
  const [confText, hostsText] = await readPodFiles(pid);
  const conf = parseResolvConf(confText);
  const hosts = parseHosts(hostsText);
  const fromHosts = (hosts.get(name.toLowerCase().replace(/\.$/, '')) ?? []).filter(
    (a) => family === undefined || a.family === family,
  );
  if (fromHosts.length > 0) return fromHosts;
  if (conf.nameservers.length === 0)
    throw new DnsError('ENOTFOUND', `${name}: the pod has no nameserver in /etc/resolv.conf`);
  // Loaded with the first query: ~0.4 MiB of RSS that an agent whose sessions resolve nothing never needs.
  const { Resolver } = await import('node:dns/promises');
  const resolver = new Resolver({ timeout: QUERY_TIMEOUT_MS, tries: 2 });
  resolver.setServers(conf.nameservers);
  let lastError: DnsError = new DnsError('ENOTFOUND', `${name} not found`);
  for (const candidate of candidates(name, conf)) {
    const found: ResolvedAddress[] = [];
    const tries: Array<[4 | 6, () => Promise<string[]>]> = [
      [4, () => resolver.resolve4(candidate)],
      [6, () => resolver.resolve6(candidate)],
    ];
    for (const [fam, query] of tries) {
      if (family !== undefined && family !== fam) continue;
      try {
        for (const address of await query()) found.push({ address, family: fam });
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code ?? 'ESERVFAIL';
        if (code !== 'ENOTFOUND' && code !== 'ENODATA')
          lastError = new DnsError(code, `${candidate}: ${(err as Error).message}`);
      }
    }
    if (found.length > 0) return found;
  }
  throw lastError;
}
