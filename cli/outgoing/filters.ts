// Which outgoing destinations go through the cluster and which stay local: rules by host glob, IP/CIDR and port, parsed
// once by the CLI (bad rules are user errors) and matched by the Node preload on every connect and lookup.
import { ipFamily } from '../../shared/ip-family.js';

/** One parsed rule. `port` undefined = any port. */
export type OutgoingRule =
  | { kind: 'host'; glob: string; regex: RegExp; ports?: PortRange; text: string }
  | { kind: 'cidr'; family: 4 | 6; address: string; network: bigint; prefix: number; ports?: PortRange; text: string }
  | { kind: 'port'; ports: PortRange; text: string };

export interface PortRange {
  from: number;
  to: number;
}

export interface OutgoingFilter {
  /** Destinations that go through the cluster; empty = everything not excluded. */
  include: OutgoingRule[];
  /** Destinations that always stay local (wins over include). */
  exclude: OutgoingRule[];
}

/** What stays local whatever the user says: this machine itself. */
export const ALWAYS_LOCAL: readonly string[] = ['localhost', '*.localhost', '127.0.0.0/8', '::1', '0.0.0.0', '::'];

export class FilterSyntaxError extends Error {
  constructor(rule: string, why: string) {
    super(`bad outgoing rule "${rule}": ${why}`);
    this.name = 'FilterSyntaxError';
  }
}

/**
 * Parses one rule: `HOST`, `HOST:PORT`, `*.svc.cluster.local`, `10.0.0.0/8`, `10.0.0.0/8:443`, `::1`, `[fd00::]/8:80`,
 * `:5432`, `*:8000-8999`. Throws FilterSyntaxError.
 */
export function parseOutgoingRule(input: string): OutgoingRule {
  const text = input.trim();
  if (!text) throw new FilterSyntaxError(input, 'empty');
  let hostPart = text;
  let portPart: string | undefined;
  if (text.startsWith('[')) {
    const close = text.indexOf(']');
    if (close < 0) throw new FilterSyntaxError(input, 'missing "]"');
    hostPart = text.slice(1, close);
    let rest = text.slice(close + 1);
    if (rest.startsWith('/')) {
      const slash = /^\/(\d+)/.exec(rest);
      if (!slash) throw new FilterSyntaxError(input, 'bad prefix length');
      hostPart += slash[0];
      rest = rest.slice(slash[0].length);
    }
    if (rest.startsWith(':')) portPart = rest.slice(1);
    else if (rest) throw new FilterSyntaxError(input, `unexpected "${rest}"`);
  } else {
    const colons = text.split(':').length - 1;
    // More than one colon without brackets: a bare IPv6 address or CIDR, no port.
    if (colons === 1) {
      const at = text.lastIndexOf(':');
      hostPart = text.slice(0, at);
      portPart = text.slice(at + 1);
    }
  }
  const ports = portPart === undefined ? undefined : parsePorts(input, portPart);
  if (hostPart === '' || hostPart === '*') {
    if (!ports) throw new FilterSyntaxError(input, 'a rule needs a host, an address or a port');
    return { kind: 'port', ports, text };
  }
  const slash = hostPart.indexOf('/');
  const address = slash >= 0 ? hostPart.slice(0, slash) : hostPart;
  const family = ipFamily(address);
  if (family) {
    const bits = family === 4 ? 32 : 128;
    const prefix = slash >= 0 ? Number(hostPart.slice(slash + 1)) : bits;
    if (!Number.isInteger(prefix) || prefix < 0 || prefix > bits) {
      throw new FilterSyntaxError(input, `prefix length must be 0..${bits}`);
    }
    const mask = prefixMask(prefix, bits);
    return {
      kind: 'cidr',
      family: family as 4 | 6,
      address,
      network: addressToBigInt(address) & mask,
      prefix,
      ports,
      text,
    };
  }
  if (slash >= 0) throw new FilterSyntaxError(input, `"${address}" is not an IP address`);
  if (!/^[a-z0-9*_.-]+$/i.test(hostPart)) {
    throw new FilterSyntaxError(input, 'a host may contain letters, digits, "-", "_", "." and "*" globs');
  }
  const glob = hostPart.toLowerCase().replace(/\.$/, '');
  return { kind: 'host', glob, regex: globToRegex(glob), ports, text };
}

function parsePorts(input: string, text: string): PortRange {
  const match = /^(\d{1,5})(?:-(\d{1,5}))?$/.exec(text);
  if (!match) throw new FilterSyntaxError(input, `"${text}" is not a port or a port range`);
  const from = Number(match[1]);
  const to = match[2] === undefined ? from : Number(match[2]);
  if (from < 1 || to > 65535 || from > to) throw new FilterSyntaxError(input, 'ports are 1..65535, low-high');
  return { from, to };
}

function globToRegex(glob: string): RegExp {
  const escaped = glob.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*');
  return new RegExp(`^${escaped}$`, 'i');
}

function prefixMask(prefix: number, bits: number): bigint {
  if (prefix === 0) return 0n;
  const all = (1n << BigInt(bits)) - 1n;
  return (all >> BigInt(bits - prefix)) << BigInt(bits - prefix);
}

/** An IPv4 or IPv6 address as an integer (IPv4-mapped IPv6 addresses are compared as IPv4 by the caller). */
export function addressToBigInt(address: string): bigint {
  if (ipFamily(address) === 4) {
    return address.split('.').reduce((acc, part) => (acc << 8n) | BigInt(Number(part)), 0n);
  }
  let text = address;
  // An embedded dotted quad (::ffff:1.2.3.4) becomes two hex groups.
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const v4 = addressToBigInt(dotted[1]);
    text = `${text.slice(0, -dotted[1].length)}${(v4 >> 16n).toString(16)}:${(v4 & 0xffffn).toString(16)}`;
  }
  const [head, tail] = text.split('::');
  const headGroups = head ? head.split(':') : [];
  const tailGroups = tail === undefined ? [] : tail ? tail.split(':') : [];
  const missing = 8 - headGroups.length - tailGroups.length;
  const groups = [...headGroups, ...Array<string>(tail === undefined ? 0 : missing).fill('0'), ...tailGroups];
  return groups.reduce((acc, group) => (acc << 16n) | BigInt(parseInt(group || '0', 16)), 0n);
}

export function parseOutgoingFilter(options: {
  include?: readonly string[];
  exclude?: readonly string[];
}): OutgoingFilter {
  return {
    include: (options.include ?? []).map(parseOutgoingRule),
    exclude: [...ALWAYS_LOCAL, ...(options.exclude ?? [])].map(parseOutgoingRule),
  };
}

function portMatches(ports: PortRange | undefined, port: number | undefined): boolean {
  if (!ports) return true;
  return port !== undefined && port >= ports.from && port <= ports.to;
}

/**
 * Whether `rule` matches host (a name or an IP literal) and port (undefined for a DNS lookup: port rules then match).
 */
export function ruleMatches(rule: OutgoingRule, host: string, port?: number): boolean {
  if (rule.kind === 'port') return port === undefined || portMatches(rule.ports, port);
  if (port !== undefined && !portMatches(rule.ports, port)) return false;
  const name = host
    .toLowerCase()
    .replace(/^\[|\]$/g, '')
    .replace(/\.$/, '');
  if (rule.kind === 'host') return rule.regex.test(name);
  let family = ipFamily(name);
  if (!family) return false;
  let value = addressToBigInt(name);
  // ::ffff:10.1.2.3 is the IPv4 address 10.1.2.3 for the purpose of a v4 rule.
  if (family === 6 && rule.family === 4 && value >> 32n === 0xffffn) {
    value &= 0xffffffffn;
    family = 4;
  }
  if (family !== rule.family) return false;
  const bits = family === 4 ? 32 : 128;
  return (value & prefixMask(rule.prefix, bits)) === rule.network;
}

/** 'cluster' when the destination goes through the tunnel, 'local' when it stays on this machine. */
export function routeOf(filter: OutgoingFilter, host: string, port?: number): 'cluster' | 'local' {
  if (filter.exclude.some((rule) => ruleMatches(rule, host, port))) return 'local';
  // A port-only include rule says nothing about a DNS lookup (no port yet): the name resolves through the cluster.
  if (filter.include.length === 0) return 'cluster';
  return filter.include.some((rule) => ruleMatches(rule, host, port)) ? 'cluster' : 'local';
}

/** NO_PROXY entries for the non-Node proxy env: the host and CIDR excludes (port-only rules cannot be said there). */
export function noProxyEntries(exclude: readonly string[]): string[] {
  const entries = ['localhost', '127.0.0.1', '::1'];
  for (const text of exclude) {
    const rule = parseOutgoingRule(text);
    if (rule.kind === 'port') continue;
    const host =
      rule.kind === 'host'
        ? rule.glob.replace(/^\*\./, '.')
        : rule.prefix === (rule.family === 4 ? 32 : 128)
          ? rule.address
          : `${rule.address}/${rule.prefix}`;
    if (rule.kind === 'host' && host.includes('*') && host !== '*') continue; // NO_PROXY has only suffix matching.
    if (!entries.includes(host)) entries.push(host);
  }
  return entries;
}
