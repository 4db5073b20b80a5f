// bench/lib/tun-path.ts (and delay-tun.c under it) is a path on which TCP itself waits the round trip: the handshake
// and every answer take twice the delay, bulk data crosses intact and in order both ways, a service on the far side's
// loopback is reachable once exposed, and closing the path leaves no namespace or device behind. The tunnel bench's
// 20 ms figures are only worth reading if that holds.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { hasCc } from './has-cc.js';
import { startTunPath, type TunPath } from './tun-path.js';

const run = requireRoot('the bench tun path') && hasCc;
const DELAY_MS = 10;
const MiB = 1024 * 1024;
/** Far more than one round trip's worth at any speed this path reaches: segmentation offload, order, many windows. */
const UPLOAD = 24 * MiB + 4321;
const DOWNLOAD = 8 * MiB + 17;

const sha = (data: Buffer): string => createHash('sha256').update(data).digest('hex');

/**
 * In the far namespace: on 0.0.0.0 a server that answers each connection's upload with its hash after the half-close,
 * then `download` bytes of a fixed pattern; on 127.0.0.1 one that answers "pong" to anything.
 */
const FAR_SERVERS = `
const net = require('node:net');
const { createHash } = require('node:crypto');
const download = Buffer.alloc(${DOWNLOAD}, 0).map((_, i) => (i * 7) & 255);
const bulk = net.createServer({ allowHalfOpen: true }, (s) => {
  const h = createHash('sha256');
  s.on('data', (d) => h.update(d));
  s.on('end', () => { s.write(h.digest('hex') + '\\n'); s.end(download); });
});
const ping = net.createServer((s) => s.on('data', () => s.write('pong')));
bulk.listen(0, '0.0.0.0', () => ping.listen(0, '127.0.0.1', () =>
  console.log(JSON.stringify({ bulk: bulk.address().port, ping: ping.address().port }))));
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
`;

function connectTimed(host: string, port: number): Promise<{ sock: net.Socket; ms: number }> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const sock = net.connect({ host, port, allowHalfOpen: true }, () => resolve({ sock, ms: performance.now() - t0 }));
    sock.once('error', reject);
  });
}

describe.skipIf(!run)(`bench tun path${hasCc ? '' : ' (skipped: no cc to build delay-tun.c)'}`, () => {
  let dir: string;
  let path: TunPath;
  let servers: ChildProcess;
  let ports: { bulk: number; ping: number };
  let ns: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'devop-tun-path-'));
    path = await startTunPath(dir, DELAY_MS);
    ns = path.exec[path.exec.length - 1];
    servers = spawn(path.exec[0], [...path.exec.slice(1), process.execPath, '-e', FAR_SERVERS], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    const [line] = (await once(servers.stdout as NodeJS.ReadableStream, 'data')) as [Buffer];
    ports = JSON.parse(line.toString()) as typeof ports;
  }, 60_000);

  afterAll(async () => {
    if (servers && servers.exitCode === null) {
      servers.stdin?.end();
      await once(servers, 'exit');
    }
    await path?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('makes TCP wait the round trip: the handshake and each answer take twice the delay', async () => {
    path.expose(ports.ping);
    const { sock, ms } = await connectTimed(path.far, ports.ping);
    expect(ms).toBeGreaterThanOrEqual(2 * DELAY_MS - 1);
    const answers: number[] = [];
    for (let i = 0; i < 3; i++) {
      const t0 = performance.now();
      sock.write('ping');
      await once(sock, 'data');
      answers.push(performance.now() - t0);
    }
    sock.destroy();
    for (const ms of answers) expect(ms).toBeGreaterThanOrEqual(2 * DELAY_MS - 1);
  });

  it('carries bulk data intact and in order both ways, and the half-close', async () => {
    const upload = randomBytes(UPLOAD);
    const { sock } = await connectTimed(path.far, ports.bulk);
    const got: Buffer[] = [];
    sock.on('data', (d: Buffer) => got.push(d));
    sock.end(upload);
    await once(sock, 'end');
    const answer = Buffer.concat(got);
    const nl = answer.indexOf('\n');
    expect(answer.subarray(0, nl).toString()).toBe(sha(upload));
    const expected = Buffer.from(new Uint8Array(DOWNLOAD).map((_, i) => (i * 7) & 255));
    expect(sha(answer.subarray(nl + 1))).toBe(sha(expected));
  }, 60_000);

  it('leaves no namespace or device behind when closed', async () => {
    servers.stdin?.end();
    await once(servers, 'exit');
    await path.close();
    expect(execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })).not.toContain(ns);
    expect(execFileSync('ip', ['-o', 'link'], { encoding: 'utf8' })).not.toContain(`dbt${process.pid}`);
  });
});
