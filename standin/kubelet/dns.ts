// The cluster DNS on the node IP, port 53 (UDP and TCP), as CoreDNS's kubernetes plugin answers:
// <svc>.<ns>.svc.<domain> (ClusterIP, or the ready endpoints of a headless Service), <endpoint>.<svc>.<ns>.svc.<domain>
// (a ready endpoint by its hostname, as a StatefulSet's pods are named, or dashed IP), <a-b-c-d>.<ns>.pod.<domain>;
// every other name is NXDOMAIN (there is no upstream: pods only reach the cluster). A records carry a Service's IPv4
// addresses, AAAA records its IPv6 ones (a dual-stack Service has both: CoreDNS plugin/kubernetes answers each type
// from its family's ClusterIP or endpoints).
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

type Answer = { type: 'A'; ip: string } | { type: 'AAAA'; ip: string } | { type: 'SRV'; port: number; target: string };

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
): Buffer {
  const header = Buffer.alloc(12);
  header.writeUInt16BE(id, 0);
  // QR, the query's opcode and RD, AA (we are the authority for the cluster domain), RA, rcode.
  const flags = 0x8000 | (queryFlags & 0x7900) | 0x0400 | 0x0080 | rcode;
  header.writeUInt16BE(flags, 2);
  header.writeUInt16BE(question ? 1 : 0, 4);
  header.writeUInt16BE(answers.length, 6);
  const records = answers.map((a) => {
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
      head.writeUInt16BE(100, 2);
      head.writeUInt16BE(a.port, 4);
      data = Buffer.concat([head, encodeName(a.target)]);
    }
    fixed.writeUInt16BE(data.length, 8);
    // 0xC00C points at the question's name.
    return Buffer.concat([Buffer.from([0xc0, 0x0c]), fixed, data]);
  });
  return Buffer.concat([header, question?.raw ?? Buffer.alloc(0), ...records]);
}

/** The answer for a name: undefined = NXDOMAIN, [] = the name exists but has no record of that type. */
export function resolveName(name: string, type: number, data: DnsData): Answer[] | undefined {
  const suffix = `.${data.domain}`;
  if (!name.endsWith(suffix)) return undefined;
  const parts = name.slice(0, -suffix.length).split('.');
  if (parts.length === 3 && parts[2] === 'pod') {
    const m = /^(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})$/.exec(parts[0]);
    if (!m) return undefined;
    return type === TYPE_A ? [{ type: 'A', ip: m.slice(1).join('.') }] : [];
  }
  if (parts.length === 4 && parts[3] === 'svc') return resolveEndpoint(parts[0], parts[1], parts[2], type, data);
  const srv = parts.length === 5 && parts[4] === 'svc' && parts[0].startsWith('_') && parts[1].startsWith('_');
  if (!((parts.length === 3 && parts[2] === 'svc') || srv)) return undefined;
  const [svcName, ns] = srv ? [parts[2], parts[3]] : [parts[0], parts[1]];
  const svc = data.service(ns, svcName);
  if (!svc) return undefined;
  const ip = svc.spec?.clusterIP;
  const svcFqdn = `${svcName}.${ns}.svc.${data.domain}`;
  if (srv) {
    const port = (svc.spec?.ports ?? []).find(
      (p) => `_${p.name ?? ''}` === parts[0] && `_${(p.protocol ?? 'TCP').toLowerCase()}` === parts[1],
    );
    if (!port) return undefined;
    return type === TYPE_SRV ? [{ type: 'SRV', port: port.port, target: svcFqdn }] : [];
  }
  if (type !== TYPE_A && type !== TYPE_AAAA) return [];
  const six = type === TYPE_AAAA;
  const record = six ? ('AAAA' as const) : ('A' as const);
  const families = svc.spec?.ipFamilies ?? ['IPv4'];
  if (ip && ip !== 'None')
    return (svc.spec?.clusterIPs ?? [ip]).filter((c) => isIPv6(c) === six).map((c) => ({ type: record, ip: c }));
  // Headless: the ready endpoints of the asked family (Endpoints hold the primary family's; the other's are twins).
  if (!families.includes(six ? 'IPv6' : 'IPv4')) return [];
  const eps = data.endpoints(ns, svcName);
  return (eps?.subsets ?? [])
    .flatMap((s) => s.addresses ?? [])
    .map((a) => (isIPv6(a.ip) === six ? a.ip : data.twin?.(a.ip)))
    .filter((a): a is string => a !== undefined)
    .map((a) => ({ type: record, ip: a }));
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

export function answerQuery(msg: Buffer, data: DnsData): Buffer | undefined {
  const query = parseQuery(msg);
  if (!query) return msg.length >= 2 ? buildResponse(msg.readUInt16BE(0), 0, undefined, RCODE_FORMERR, []) : undefined;
  const { id, flags, question } = query;
  if ((flags & 0x7800) !== 0 || question.klass !== CLASS_IN)
    return buildResponse(id, flags, question, RCODE_NOTIMP, []);
  const answers = resolveName(question.name, question.type, data);
  return buildResponse(id, flags, question, answers ? RCODE_OK : RCODE_NXDOMAIN, answers ?? []);
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
      const reply = answerQuery(msg, this.data);
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
