// The cluster DNS on the node IP, port 53 (UDP and TCP), as CoreDNS's kubernetes plugin answers:
// <svc>.<ns>.svc.<domain> (ClusterIP, or the ready endpoints of a headless Service), <endpoint>.<svc>.<ns>.svc.<domain>
// (a ready endpoint by its hostname, as a StatefulSet's pods are named, or dashed IP), _<port>._<proto>.<svc>.<ns>.svc.
// <domain> (SRV: the Service's name, or one per ready endpoint of a headless Service, their addresses in the additional
// section), <a-b-c-d>.<ns>.pod.<domain>; every other name is NXDOMAIN (there is no upstream: pods only reach the
// cluster). A records carry a Service's IPv4 addresses, AAAA records its IPv6 ones (a dual-stack Service has both:
// CoreDNS plugin/kubernetes answers each type from its family's ClusterIP or endpoints).
import { isIPv6 } from 'node:net';
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { createServer, type Server } from 'node:net';
import type { V1Endpoints, V1Service } from '@kubernetes/client-node';

const TYPE_A = 1;
const TYPE_AAAA = 28;
const TYPE_SRV = 33;
const CLASS_IN = 1;
const RCODE_OK = 0;
const RCODE_FORMERR = 1;
const RCODE_NXDOMAIN = 3;
const RCODE_NOTIMP = 4;
/** A UDP answer's limit without EDNS (RFC 1035 4.2.1): a longer one keeps what fits (answerQuery). */
const UDP_MAX = 512;
/** Short TTLs: test Services come and go within seconds. */
const TTL_SECONDS = 5;

export interface DnsData {
  domain: string;
  service(namespace: string, name: string): V1Service | undefined;
  endpoints(namespace: string, name: string): V1Endpoints | undefined;
  /** A pod's address of the other family (its IPv6 twin): a headless dual-stack Service's other endpoints. */
  twin?(ip: string): string | undefined;
}

interface Question {
  name: string;
  type: number;
  klass: number;
  /** Byte range of the question in the query, copied into the answer as is. */
  raw: Buffer;
}

/** Parses the first question of a query; undefined when the message is malformed. */
export function parseQuery(msg: Buffer): { id: number; flags: number; question: Question } | undefined {
  if (msg.length < 12 || msg.readUInt16BE(4) < 1) return undefined;
  const labels: string[] = [];
  let offset = 12;
  for (;;) {
    if (offset >= msg.length) return undefined;
    const len = msg[offset];
    if (len === 0) {
      offset++;
      break;
    }
    if (len > 63 || offset + 1 + len > msg.length) return undefined;
    labels.push(msg.subarray(offset + 1, offset + 1 + len).toString('latin1'));
    offset += 1 + len;
  }
  if (offset + 4 > msg.length) return undefined;
  return {
    id: msg.readUInt16BE(0),
    flags: msg.readUInt16BE(2),
    question: {
      name: labels.join('.').toLowerCase(),
      type: msg.readUInt16BE(offset),
      klass: msg.readUInt16BE(offset + 2),
      raw: msg.subarray(12, offset + 4),
    },
  };
}

/** A record; `name` is its owner when that is not the question's name (an SRV target's address, additional). */
type Answer =
  | { type: 'A'; ip: string; name?: string }
  | { type: 'AAAA'; ip: string; name?: string }
  | { type: 'SRV'; port: number; weight: number; target: string };

/** The records for a name: the answer section and the additional one. */
export interface Resolution {
  answers: Answer[];
  additional: Answer[];
}

function encodeName(name: string): Buffer {
  return Buffer.concat([
    ...name
      .split('.')
      .filter(Boolean)
      .map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l, 'latin1')])),
    Buffer.from([0]),
  ]);
}

export function buildResponse(
  id: number,
  queryFlags: number,
  question: Question | undefined,
  rcode: number,
  answers: Answer[],
  additional: Answer[] = [],
  truncated = false,
): Buffer {
  const header = Buffer.alloc(12);
  header.writeUInt16BE(id, 0);
  // QR, the query's opcode and RD, AA (we are the authority for the cluster domain), RA, rcode.
  const flags = 0x8000 | (queryFlags & 0x7900) | 0x0400 | (truncated ? 0x0200 : 0) | 0x0080 | rcode;
  header.writeUInt16BE(flags, 2);
  header.writeUInt16BE(question ? 1 : 0, 4);
  header.writeUInt16BE(answers.length, 6);
  header.writeUInt16BE(additional.length, 10);
  const records = [...answers, ...additional].map((a) => {
    const fixed = Buffer.alloc(10);
    fixed.writeUInt16BE(a.type === 'A' ? TYPE_A : a.type === 'AAAA' ? TYPE_AAAA : TYPE_SRV, 0);
    fixed.writeUInt16BE(CLASS_IN, 2);
    fixed.writeUInt32BE(TTL_SECONDS, 4);
    let data: Buffer;
    if (a.type === 'A') {
      data = Buffer.from(a.ip.split('.').map(Number));
    } else if (a.type === 'AAAA') {
      data = ipv6Bytes(a.ip);
    } else {
      const head = Buffer.alloc(6);
      head.writeUInt16BE(0, 0);
      head.writeUInt16BE(a.weight, 2);
      head.writeUInt16BE(a.port, 4);
      data = Buffer.concat([head, encodeName(a.target)]);
    }
    fixed.writeUInt16BE(data.length, 8);
    // 0xC00C points at the question's name.
    const owner = a.type !== 'SRV' && a.name ? encodeName(a.name) : Buffer.from([0xc0, 0x0c]);
    return Buffer.concat([owner, fixed, data]);
  });
  return Buffer.concat([header, question?.raw ?? Buffer.alloc(0), ...records]);
}

/** The answer for a name: undefined = NXDOMAIN, [] = the name exists but has no record of that type. */
export function resolveName(name: string, type: number, data: DnsData): Answer[] | undefined {
  return resolve(name, type, data)?.answers;
}

/** A name's records, with the additional section an SRV answer carries; undefined = NXDOMAIN. */
export function resolve(name: string, type: number, data: DnsData): Resolution | undefined {
  const suffix = `.${data.domain}`;
  if (!name.endsWith(suffix)) return undefined;
  const parts = name.slice(0, -suffix.length).split('.');
  if (parts.length === 5 && parts[4] === 'svc' && parts[0].startsWith('_') && parts[1].startsWith('_')) {
    const [port, proto, svcName, ns] = [parts[0].slice(1), parts[1].slice(1), parts[2], parts[3]];
    const svc = data.service(ns, svcName);
    return svc && resolveSrvName(port, proto, svc, ns, svcName, type, data);
  }
  const answers = resolveAddress(parts, type, data);
  return answers && { answers, additional: [] };
}

/** <svc>.<ns>.svc, <endpoint>.<svc>.<ns>.svc and <a-b-c-d>.<ns>.pod (the name without the cluster domain). */
function resolveAddress(parts: string[], type: number, data: DnsData): Answer[] | undefined {
  if (parts.length === 3 && parts[2] === 'pod') {
    const m = /^(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})$/.exec(parts[0]);
    if (!m) return undefined;
    return type === TYPE_A ? [{ type: 'A', ip: m.slice(1).join('.') }] : [];
  }
  if (parts.length === 4 && parts[3] === 'svc') return resolveEndpoint(parts[0], parts[1], parts[2], type, data);
  if (parts.length !== 3 || parts[2] !== 'svc') return undefined;
  const [svcName, ns] = parts;
  const svc = data.service(ns, svcName);
  if (!svc) return undefined;
  const ip = svc.spec?.clusterIP;
  const six = type === TYPE_AAAA;
  const record = six ? ('AAAA' as const) : ('A' as const);
  if (ip && ip !== 'None') {
    if (type !== TYPE_A && type !== TYPE_AAAA) return [];
    return (svc.spec?.clusterIPs ?? [ip]).filter((c) => isIPv6(c) === six).map((c) => ({ type: record, ip: c }));
  }
  // Headless: the ready endpoints of the asked family (Endpoints hold the primary family's; the other's are twins).
  // Without any, the name does not exist (CoreDNS plugin/kubernetes/kubernetes.go findServices: errNoItems).
  const addresses = (data.endpoints(ns, svcName)?.subsets ?? []).flatMap((s) => s.addresses ?? []);
  if (addresses.length === 0) return undefined;
  if (type !== TYPE_A && type !== TYPE_AAAA) return [];
  if (!(svc.spec?.ipFamilies ?? ['IPv4']).includes(six ? 'IPv6' : 'IPv4')) return [];
  return addresses
    .map((a) => (isIPv6(a.ip) === six ? a.ip : data.twin?.(a.ip)))
    .filter((a): a is string => a !== undefined)
    .map((a) => ({ type: record, ip: a }));
}

/** One (address, port) a Service name stands for, and the name CoreDNS gives that address (an SRV target). */
interface Backend {
  ip: string;
  port: number;
  target: string;
}

/**
 * What _<port>._<proto>.<svc>.<ns>.svc names, as CoreDNS plugin/kubernetes/kubernetes.go findServices lists it: for a
 * headless Service each ready endpoint address (and its twin behind a dual-stack Service) with each of its subset's
 * ports of that name and protocol, named <hostname or dashed IP>.<svc>…; for a ClusterIP Service each ClusterIP with
 * the Service's port, named by the Service.
 */
function srvBackends(port: string, proto: string, svc: V1Service, ns: string, name: string, data: DnsData): Backend[] {
  const svcFqdn = `${name}.${ns}.svc.${data.domain}`;
  const matches = (p: { name?: string; protocol?: string }) =>
    (p.name ?? '').toLowerCase() === port && (p.protocol ?? 'TCP').toLowerCase() === proto;
  const ip = svc.spec?.clusterIP;
  if (ip && ip !== 'None')
    return (svc.spec?.ports ?? [])
      .filter(matches)
      .flatMap((p) => (svc.spec?.clusterIPs ?? [ip]).map((c) => ({ ip: c, port: p.port, target: svcFqdn })));
  const dual = (svc.spec?.ipFamilies ?? []).length > 1;
  return (data.endpoints(ns, name)?.subsets ?? []).flatMap((s) =>
    (s.addresses ?? []).flatMap((a) => {
      const twin = dual ? data.twin?.(a.ip) : undefined;
      return [a.ip, ...(twin ? [twin] : [])].flatMap((addr) =>
        (s.ports ?? [])
          .filter(matches)
          .map((p) => ({ ip: addr, port: p.port, target: `${a.hostname ?? dashedIP(addr)}.${svcFqdn}` })),
      );
    }),
  );
}

/**
 * _<port>._<proto>.<svc>.<ns>.svc: NXDOMAIN when it names nothing (no such port, no ready endpoint); for SRV one record
 * per target and port, weight 100 shared out over what the name stands for, each target's address in the additional
 * section; for A/AAAA the addresses of that family (coredns plugin/backend_lookup.go SRV, A; kubernetes/dns
 * docs/specification.md 2.4.2).
 */
function resolveSrvName(
  port: string,
  proto: string,
  svc: V1Service,
  ns: string,
  name: string,
  type: number,
  data: DnsData,
): Resolution | undefined {
  const backends = srvBackends(port, proto, svc, ns, name, data);
  if (backends.length === 0) return undefined;
  const address = (ip: string, owner?: string): Answer => ({
    type: isIPv6(ip) ? 'AAAA' : 'A',
    ip,
    ...(owner ? { name: owner } : {}),
  });
  if (type === TYPE_A || type === TYPE_AAAA) {
    const ips = new Set(backends.filter((b) => isIPv6(b.ip) === (type === TYPE_AAAA)).map((b) => b.ip));
    return { answers: [...ips].map((ip) => address(ip)), additional: [] };
  }
  if (type !== TYPE_SRV) return { answers: [], additional: [] };
  // Every entry counts towards the shared weight, duplicates too (backend_lookup.go SRV: 100 / entries, at least 1).
  const weight = Math.max(1, Math.floor(100 / backends.length));
  const answers: Answer[] = [];
  const additional: Answer[] = [];
  const seen = new Set<string>();
  for (const b of backends) {
    if (!seen.has(`${b.target} ${b.port}`)) answers.push({ type: 'SRV', port: b.port, weight, target: b.target });
    if (!seen.has(`${b.target} ${b.ip}`)) additional.push(address(b.ip, b.target));
    seen.add(`${b.target} ${b.port}`).add(`${b.target} ${b.ip}`);
  }
  return { answers, additional };
}

/** An endpoint's name when it has no hostname, as CoreDNS makes it (endpointHostname): its IP, '.' and ':' as '-'. */
function dashedIP(ip: string): string {
  const dashed = ip.replace(/[.:]/g, '-');
  return dashed.endsWith('-') ? `${dashed}0` : dashed;
}

/**
 * <endpoint>.<svc>.<ns>.svc.<domain>: the Service's ready endpoints named <endpoint> — the address's hostname (a pod
 * whose spec.subdomain is the Service), else its dashed IP — as CoreDNS plugin/kubernetes/kubernetes.go answers them
 * (findServices, endpointHostname; any Service with endpoints, headless or not). A hostname names the pod's twin too
 * (its EndpointSlice of the other family carries the same hostname); a dashed IP names that address alone.
 */
function resolveEndpoint(
  endpoint: string,
  svcName: string,
  ns: string,
  type: number,
  data: DnsData,
): Answer[] | undefined {
  const svc = data.service(ns, svcName);
  if (!svc) return undefined;
  const families = svc.spec?.ipFamilies ?? ['IPv4'];
  const ips = new Set<string>();
  for (const addr of (data.endpoints(ns, svcName)?.subsets ?? []).flatMap((s) => s.addresses ?? [])) {
    const twin = families.length > 1 ? data.twin?.(addr.ip) : undefined;
    if (addr.hostname) {
      if (addr.hostname.toLowerCase() !== endpoint) continue;
      ips.add(addr.ip);
      if (twin) ips.add(twin);
    } else if (dashedIP(addr.ip) === endpoint) ips.add(addr.ip);
    else if (twin && dashedIP(twin) === endpoint) ips.add(twin);
  }
  if (ips.size === 0) return undefined;
  if (type !== TYPE_A && type !== TYPE_AAAA) return [];
  const six = type === TYPE_AAAA;
  return [...ips].filter((ip) => isIPv6(ip) === six).map((ip) => ({ type: six ? 'AAAA' : 'A', ip }));
}

/** An IPv6 address's 16 bytes. */
function ipv6Bytes(ip: string): Buffer {
  const [head, tail = ''] = ip.split('::');
  const groups = (part: string) => (part ? part.split(':').map((g) => Number.parseInt(g, 16)) : []);
  const all = ip.includes('::')
    ? [...groups(head), ...new Array(8 - groups(head).length - groups(tail).length).fill(0), ...groups(tail)]
    : groups(head);
  const bytes = Buffer.alloc(16);
  for (const [i, g] of all.entries()) bytes.writeUInt16BE(g, i * 2);
  return bytes;
}

/**
 * The reply to a query. Over UDP (`limit` 512: no EDNS size is read) a longer reply keeps the answers and the
 * additional records that fit, or, when the answers do not, those that fit with TC set so the client asks again over
 * TCP — as CoreDNS's request.Scrub does (miekg/dns msg_truncate.go Truncate).
 */
export function answerQuery(msg: Buffer, data: DnsData, limit = Number.POSITIVE_INFINITY): Buffer | undefined {
  const query = parseQuery(msg);
  if (!query) return msg.length >= 2 ? buildResponse(msg.readUInt16BE(0), 0, undefined, RCODE_FORMERR, []) : undefined;
  const { id, flags, question } = query;
  if ((flags & 0x7800) !== 0 || question.klass !== CLASS_IN)
    return buildResponse(id, flags, question, RCODE_NOTIMP, []);
  const found = resolve(question.name, question.type, data);
  if (!found) return buildResponse(id, flags, question, RCODE_NXDOMAIN, []);
  const { answers, additional } = found;
  const reply = (n: number, extra: number) =>
    buildResponse(id, flags, question, RCODE_OK, answers.slice(0, n), additional.slice(0, extra), n < answers.length);
  let n = answers.length;
  while (n > 0 && reply(n, 0).length > limit) n--;
  let extra = n < answers.length ? 0 : additional.length;
  while (extra > 0 && reply(n, extra).length > limit) extra--;
  return reply(n, extra);
}

export class ClusterDns {
  private udp: UdpSocket | undefined;
  private tcp: Server | undefined;
  private readonly conns = new Set<import('node:net').Socket>();

  constructor(
    private readonly address: string,
    private readonly data: DnsData,
    private readonly port = 53,
  ) {}

  async start(): Promise<void> {
    const udp = createSocket({ type: 'udp4', reuseAddr: true });
    udp.on('message', (msg, rinfo) => {
      const reply = answerQuery(msg, this.data, UDP_MAX);
      if (reply) udp.send(reply, rinfo.port, rinfo.address);
    });
    await new Promise<void>((resolve, reject) => {
      udp.once('error', reject);
      udp.bind(this.port, this.address, () => {
        udp.off('error', reject);
        resolve();
      });
    });
    udp.on('error', () => undefined); // a bad datagram must not stop the server
    this.udp = udp;
    const tcp = createServer((conn) => {
      this.conns.add(conn);
      conn.on('close', () => this.conns.delete(conn));
      let buf = Buffer.alloc(0);
      conn.on('data', (chunk: Buffer) => {
        buf = Buffer.concat([buf, chunk]);
        while (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
          const msg = buf.subarray(2, 2 + buf.readUInt16BE(0));
          buf = buf.subarray(2 + msg.length);
          const reply = answerQuery(msg, this.data);
          if (!reply) continue;
          const len = Buffer.alloc(2);
          len.writeUInt16BE(reply.length);
          conn.write(Buffer.concat([len, reply]));
        }
      });
      conn.on('error', () => undefined); // a client that resets is simply gone
    });
    await new Promise<void>((resolve, reject) => {
      tcp.once('error', reject);
      tcp.listen(this.port, this.address, () => resolve());
    });
    this.tcp = tcp;
  }

  async stop(): Promise<void> {
    this.udp?.close();
    for (const conn of this.conns) conn.destroy();
    await new Promise<void>((resolve) => (this.tcp ? this.tcp.close(() => resolve()) : resolve()));
  }
}
