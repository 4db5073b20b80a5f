// The packet capture behind mirroring (agent/native/capture.c, built to dist/devop-capture), run by itself in a pod's
// netns: what its kernel filter lets through (clients' packets to the port; not the pod's own answers, not lo, not
// other ports, not the node when asked), the pcap stream the agent reads, and how it ends (its stdin closes; its parent
// dies) or refuses to start (no CAP_NET_RAW, bad arguments).
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { PcapReader, TCP_FLAGS, type TcpSegment } from '../../agent/incoming/pcap.js';
import { requireRoot } from '../../testkit/root.js';
import { PodNet, sh } from '../../testkit/netns.js';
import { waitFor } from '../../testkit/wait.js';

const run = requireRoot('agent packet capture');
const CAPTURE = resolve(import.meta.dirname, '../../dist/devop-capture');

interface Capture {
  child: ChildProcess;
  segments: TcpSegment[];
  stderr: string[];
  exit: Promise<number | null>;
}

/** Starts `cmd` (devop-capture, or a wrapper around it) in the pod's netns; reads its pcap stream and its stderr. */
function startCapture(net: PodNet, cmd: string[]): Capture {
  const child = spawn('nsenter', [`--net=/run/netns/${net.podNs}`, '--', ...cmd], { stdio: ['pipe', 'pipe', 'pipe'] });
  const reader = new PcapReader();
  const capture: Capture = {
    child,
    segments: [],
    stderr: [],
    exit: new Promise((done) => child.once('close', (code) => done(code))),
  };
  child.stdout?.on('data', (chunk: Buffer) => capture.segments.push(...reader.push(chunk)));
  child.stderr?.on('data', (chunk: Buffer) => capture.stderr.push(...chunk.toString().split('\n').filter(Boolean)));
  return capture;
}

async function listening(capture: Capture): Promise<void> {
  await waitFor('the capture to listen', () => capture.stderr.some((l) => l.startsWith('listening on')));
}

const curl = (ns: string, url: string): Promise<string> => sh(`ip netns exec ${ns} curl -s -m 5 ${url} || true`);

describe.runIf(run)('agent: the packet capture program', () => {
  const net = new PodNet();
  beforeAll(async () => {
    if (!existsSync(CAPTURE))
      throw new Error(
        `${CAPTURE} is missing: it is built by scripts/build.mjs with cc (scripts/setup.sh installs gcc)`,
      );
    await net.setup();
    await net.startPod({ port: 3000 });
    // A second server in the pod, on a port nobody mirrors.
    const other = 'require("http").createServer((q, s) => s.end("other")).listen(3001)';
    spawn('ip', ['netns', 'exec', net.podNs, process.execPath, '-e', other], { stdio: 'ignore' }); // teardown ends it
    await waitFor('port 3001', async () => (await curl(net.clientNs, `http://${net.podIP}:3001/`)) === 'other');
  });
  afterAll(() => net.teardown());

  test(
    "captures the clients' packets to the port only: not the pod's answers, lo, other ports or the skipped " +
      'source; ends when its stdin closes',
    async () => {
      // Given a capture of port 3000 that skips the node's address (kubelet's probes come from it)
      const capture = startCapture(net, [CAPTURE, '3000', '2048', net.nodeIP]);
      await listening(capture);
      // When a client, the node, the pod itself (over lo) and a client of port 3001 call
      expect(await curl(net.clientNs, `http://${net.podIP}:3000/from-client`)).toBe('pod: GET /from-client');
      expect(await sh(`curl -s -m 5 http://${net.podIP}:3000/from-node`)).toBe('pod: GET /from-node');
      expect(await curl(net.podNs, 'http://127.0.0.1:3000/from-lo')).toBe('pod: GET /from-lo');
      expect(await curl(net.clientNs, `http://${net.podIP}:3001/other-port`)).toBe('other');
      // Then (once a batch is read) the capture holds the client's packets to :3000, from SYN to FIN, and nothing else
      await waitFor("the client's FIN in the capture", () =>
        capture.segments.some((s) => (s.flags & TCP_FLAGS.FIN) !== 0),
      );
      capture.child.stdin?.end();
      expect(await capture.exit).toBe(0);
      const flows = new Set(capture.segments.map((s) => `${s.src} > ${s.dst}:${s.dstPort}`));
      expect([...flows]).toEqual([`${net.clientIP} > ${net.podIP}:3000`]);
      expect(capture.segments[0].flags & TCP_FLAGS.SYN).toBe(TCP_FLAGS.SYN);
      const bytes = Buffer.concat(capture.segments.map((s) => s.payload)).toString();
      expect(bytes).toMatch(/^GET \/from-client HTTP\/1.1\r\n/);
      expect(capture.segments.every((s) => s.complete)).toBe(true);
      // And its last line counts what it took
      expect(capture.stderr.at(-1)).toBe(`${capture.segments.length} packets captured, 0 dropped by kernel`);
    },
  );

  test("captures IPv6 clients' packets too, and skips an IPv6 source when asked", async () => {
    // Given a dual-stack app on port 3002 and a capture of it that skips the node's IPv6 address
    await net.startPod({ port: 3002, env: { LISTEN_HOST: '::' } });
    const capture = startCapture(net, [CAPTURE, '3002', '2048', net.nodeIP6]);
    await listening(capture);
    // When a client calls over IPv6 and over IPv4, and the node over IPv6
    expect(await curl(net.clientNs, `-g http://[${net.podIP6}]:3002/six`)).toBe('pod: GET /six');
    expect(await curl(net.clientNs, `http://${net.podIP}:3002/four`)).toBe('pod: GET /four');
    expect(await sh(`curl -s -m 5 -g http://[${net.podIP6}]:3002/node-six`)).toBe('pod: GET /node-six');
    // Then the capture holds both of the client's connections, each with its own family's addresses, not the node's
    await waitFor(
      'both FINs in the capture',
      () => capture.segments.filter((s) => (s.flags & TCP_FLAGS.FIN) !== 0).length >= 2,
    );
    capture.child.stdin?.end();
    expect(await capture.exit).toBe(0);
    const flows = new Set(capture.segments.map((s) => `${s.src} > ${s.dst}:${s.dstPort}`));
    expect([...flows].sort()).toEqual(
      [`${net.clientIP6} > ${net.podIP6}:3002`, `${net.clientIP} > ${net.podIP}:3002`].sort(),
    );
    const six = capture.segments.filter((s) => s.src === net.clientIP6);
    expect(Buffer.concat(six.map((s) => s.payload)).toString()).toMatch(/^GET \/six HTTP\/1.1\r\n/);
  });

  test('goes when the process that started it is killed with SIGKILL (parent-death signal)', async () => {
    // Given a capture started by a shell, whose stdin is a pipe from a sibling that outlives the shell (so no EOF can
    // end it; the pod's netns teardown ends the sibling)
    const script = `sleep 60 | ${CAPTURE} 3000 2048 & echo "pid $!" >&2; wait`;
    const capture = startCapture(net, ['sh', '-c', script]);
    await listening(capture);
    const own = Number(capture.stderr.find((l) => l.startsWith('pid '))?.slice(4));
    expect(readFileSync(`/proc/${own}/cmdline`, 'utf8')).toContain('devop-capture');
    const shell = Number(readFileSync(`/proc/${own}/stat`, 'utf8').split(') ')[1].split(' ')[1]);
    // When its parent is killed
    process.kill(shell, 'SIGKILL');
    // Then the capture is gone too
    await waitFor('the capture to exit', () => !existsSync(`/proc/${own}`), 5000);
    capture.child.stdin?.end();
  });

  test('refuses to start with one line: without CAP_NET_RAW, and on bad arguments', async () => {
    const noRaw = startCapture(net, [
      'setpriv',
      '--bounding-set=-net_raw',
      '--inh-caps=-all',
      '--',
      CAPTURE,
      '3000',
      '2048',
    ]);
    expect(await noRaw.exit).toBe(1);
    expect(noRaw.stderr).toEqual(['devop-capture: socket(AF_PACKET) needs CAP_NET_RAW: Operation not permitted']);
    const bad = startCapture(net, [CAPTURE, '3000', '2048', 'not-an-address']);
    expect(await bad.exit).toBe(2);
    expect(bad.stderr).toEqual([
      'devop-capture: SKIP_SOURCE must be an IPv4 or IPv6 address (usage: devop-capture PORT BUFFER_KIB [SKIP_SOURCE])',
    ]);
  });
});
