// The LD_PRELOAD shim (cli/native/outgoing-shim.c, dist/devop-outgoing.so) against devop's real outgoing proxy, with a
// "cluster" on this machine: python3 (blocking, timeout and asyncio connects, a connect() repeated on a non-blocking
// socket, 32 threads at once) and a dynamically linked C client reach a cluster name and a cluster address, get
// ECONNREFUSED for a closed port and a lookup failure for an unknown name; local destinations stay local; a program
// whose proxy is gone runs as without the shim. The stand-in's end-to-end run is native-shim-e2e.test.ts.
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DialError, createLocalDialer, toDialError, type ClusterDialer } from '../../cli/outgoing/dialer.js';
import { outgoingEnv } from '../../cli/outgoing/env.js';
import { startOutgoingProxy, type OutgoingProxy } from '../../cli/outgoing/proxy.js';
import { ROOT } from '../../testkit/e2e.js';
import { recordingDialer, startHttpEcho, type Closable } from '../../testkit/outgoing.js';

const SHIM = join(ROOT, 'dist', 'devop-outgoing.so');
const PYTHON = '/usr/bin/python3';
const PY_CLIENT = join(ROOT, 'test', 'outgoing', 'fixtures', 'raw-client.py');
const C_CLIENT_SOURCE = join(ROOT, 'test', 'outgoing', 'fixtures', 'raw-client.c');
/** A "service IP" of the test's cluster: TEST-NET-2 (RFC 5737), routed nowhere from this machine. */
const SERVICE_IP = '198.51.100.7';
/** A name only the test's cluster knows (.test is reserved: no resolver of this machine answers it). */
const SERVICE_NAME = 'db.shop.svc.cluster.test';
const SECRET = 'native-shim-test-secret';
/** EAI_NONAME as glibc numbers it (Python's socket.gaierror.errno, getaddrinfo's return value). */
const EAI_NONAME = -2;
const ECONNREFUSED = 111;

interface ClientLine {
  mode?: string;
  target: string;
  body?: unknown;
  error?: string;
  errno?: number;
  code?: number;
}

function lines(stdout: string): ClientLine[] {
  return stdout
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as ClientLine);
}

function run(command: string, args: string[], env: Record<string, string>): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { env, timeout: 60_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`${command} failed: ${err.message}\n${stderr}`)) : resolve(stdout),
    );
  });
}

/**
 * The test's cluster: SERVICE_NAME resolves to SERVICE_IP, and a connect to SERVICE_IP reaches 127.0.0.1 (the echo
 * server, or a closed port).
 */
function testCluster(): ClusterDialer {
  const names = createLocalDialer({ hosts: { [SERVICE_NAME]: SERVICE_IP } });
  return {
    ...names,
    connect(host, port): Promise<Duplex> {
      if (host !== SERVICE_IP && host !== SERVICE_NAME) {
        return Promise.reject(new DialError('EHOSTUNREACH', `connect ${host}:${port}: no route in the test cluster`));
      }
      return new Promise((resolve, reject) => {
        const socket = netConnect({ host: '127.0.0.1', port, allowHalfOpen: true });
        socket.once('connect', () => resolve(socket));
        socket.once('error', (err) => reject(toDialError(err, `connect ${host}:${port}`)));
      });
    },
  };
}

describe.skipIf(process.platform !== 'linux')('the outgoing shim for dynamically linked programs', () => {
  let echo: Closable;
  let closedPort: number;
  let dialer: ReturnType<typeof recordingDialer>;
  let proxy: OutgoingProxy;
  let env: Record<string, string>;
  let work: string;
  let cClient: string;

  beforeAll(async () => {
    if (!existsSync(SHIM)) throw new Error(`${SHIM} is missing: npm run build builds it with cc`);
    work = mkdtempSync(join(tmpdir(), 'devop-shim-'));
    cClient = join(work, 'raw-client');
    execFileSync('cc', ['-O2', '-o', cClient, C_CLIENT_SOURCE]);
    // Given an HTTP echo server "in the cluster" behind SERVICE_IP, a port there that nothing listens on, and devop's
    // proxy with the env exec gives a local command (LD_PRELOAD of the shim, DEVOP_PRELOAD_CONFIG)
    echo = await startHttpEcho('cluster-echo');
    const closed = await startHttpEcho('closed');
    closedPort = closed.port;
    await closed.close();
    dialer = recordingDialer(testCluster());
    proxy = await startOutgoingProxy({ dialer, secret: SECRET });
    env = {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      ...outgoingEnv(
        {},
        {
          proxy: { host: proxy.host, port: proxy.port },
          credentials: proxy.credentials,
          include: [],
          exclude: ['192.0.2.0/24'],
          shimPath: SHIM,
        },
      ),
    };
  });
  afterAll(async () => {
    await proxy?.close();
    await echo?.close();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('python3 reaches a cluster name and a cluster IP with blocking, timeout (non-blocking) and asyncio connects', async () => {
    // When a Python program connects by raw TCP to the name and to the address, three ways each
    const specs = ['blocking', 'timeout', 'asyncio'].flatMap((mode) => [
      `${mode},${SERVICE_NAME},${echo.port},/py-${mode}-by-name`,
      `${mode},${SERVICE_IP},${echo.port},/py-${mode}-by-ip`,
    ]);
    const answers = lines(await run(PYTHON, [PY_CLIENT, ...specs], env));
    // Then every connection reached the echo server through the cluster's dialer
    expect(answers.map((line) => (JSON.parse(String(line.body ?? '{}')) as { url?: string }).url)).toEqual(
      specs.map((spec) => spec.split(',')[3]),
    );
    // And the name was resolved by the cluster, the address dialled by it
    expect(dialer.calls).toContainEqual({ op: 'lookup', target: SERVICE_NAME });
    expect(dialer.calls).toContainEqual({ op: 'connect', target: `${SERVICE_IP}:${echo.port}` });
  });

  it('a connect() called again on a non-blocking socket (to learn how it went) dials once, and connects', async () => {
    dialer.calls.length = 0;
    const answers = lines(await run(PYTHON, [PY_CLIENT, `again,${SERVICE_NAME},${echo.port},/again`], env));
    expect((JSON.parse(String(answers[0]?.body ?? '{}')) as { url?: string }).url).toBe('/again');
    expect(dialer.calls.filter((call) => call.op === 'connect')).toHaveLength(1);
  });

  it('32 threads resolving and connecting at once each get their own connection', async () => {
    // When a Python program resolves and connects from 32 threads at the same time (each its own request path)
    const script = [
      'import json, socket, sys, threading',
      'host, port = sys.argv[1], int(sys.argv[2])',
      'got = {}',
      'def fetch(i):',
      '    with socket.create_connection((host, port), timeout=20) as s:',
      '        s.sendall(f"GET /thread-{i} HTTP/1.0\\r\\n\\r\\n".encode())',
      '        data = b""',
      '        while chunk := s.recv(65536): data += chunk',
      '    got[i] = json.loads(data.split(b"\\r\\n\\r\\n", 1)[1])["url"]',
      'threads = [threading.Thread(target=fetch, args=(i,)) for i in range(32)]',
      'for t in threads: t.start()',
      'for t in threads: t.join()',
      'print(json.dumps([got.get(i) for i in range(32)]))',
    ].join('\n');
    const stdout = await run(PYTHON, ['-c', script, SERVICE_NAME, String(echo.port)], env);
    // Then every thread read the answer to its own request
    expect(JSON.parse(stdout)).toEqual(Array.from({ length: 32 }, (_, i) => `/thread-${i}`));
  });

  it('a dynamically linked C client reaches the cluster name and address', async () => {
    const byName = lines(await run(cClient, [SERVICE_NAME, String(echo.port), '/c-by-name'], env));
    const byIp = lines(await run(cClient, [SERVICE_IP, String(echo.port), '/c-by-ip'], env));
    expect(byName[0]?.body).toMatchObject({ name: 'cluster-echo', url: '/c-by-name' });
    expect(byIp[0]?.body).toMatchObject({ name: 'cluster-echo', url: '/c-by-ip' });
  });

  it('a closed cluster port is ECONNREFUSED; a name the cluster does not know is a lookup failure', async () => {
    const python = lines(
      await run(
        PYTHON,
        [
          PY_CLIENT,
          `blocking,${SERVICE_IP},${closedPort},/`,
          `asyncio,${SERVICE_NAME},${closedPort},/`,
          'blocking,nosuch.shop.svc.cluster.test,80,/',
          'asyncio,nosuch.shop.svc.cluster.test,80,/',
        ],
        env,
      ),
    );
    expect(python.map((line) => [line.error, line.errno])).toEqual([
      ['ConnectionRefusedError', ECONNREFUSED],
      ['ConnectionRefusedError', ECONNREFUSED],
      ['gaierror', EAI_NONAME],
      ['gaierror', EAI_NONAME],
    ]);
    const refused = lines(await run(cClient, [SERVICE_IP, String(closedPort), '/'], env));
    const unknown = lines(await run(cClient, ['nosuch.shop.svc.cluster.test', '80', '/'], env));
    expect(refused[0]).toMatchObject({ error: 'connect', code: ECONNREFUSED });
    expect(unknown[0]).toMatchObject({ error: 'getaddrinfo', code: EAI_NONAME });
    expect(dialer.calls).toContainEqual({ op: 'lookup', target: 'nosuch.shop.svc.cluster.test' });
  });

  it('loopback and excluded destinations stay local: the cluster is not asked', async () => {
    dialer.calls.length = 0;
    // When the program connects to this machine by address and by name (localhost), and to an excluded network
    const answers = lines(
      await run(
        PYTHON,
        [PY_CLIENT, `blocking,127.0.0.1,${echo.port},/loopback`, `timeout,localhost,${echo.port},/localhost`],
        env,
      ),
    );
    const excluded = lines(await run(PYTHON, [PY_CLIENT, 'asyncio,192.0.2.1,80,/excluded'], env));
    // Then the echo answered directly, and the cluster's dialer saw none of them (192.0.2.0/24 is routed nowhere
    // here: its connect fails locally, not through the cluster)
    expect(answers.map((line) => (JSON.parse(String(line.body ?? '{}')) as { url?: string }).url)).toEqual([
      '/loopback',
      '/localhost',
    ]);
    expect(excluded[0]?.error).toBeDefined();
    expect(dialer.calls).toEqual([]);
  });

  it('a program whose devop proxy is gone runs as without the shim (its own resolver, its own connects)', async () => {
    // Given the same env, but pointing at a loopback port where nothing listens
    const gone = {
      ...env,
      DEVOP_PRELOAD_CONFIG: (env.DEVOP_PRELOAD_CONFIG ?? '').replace(`"port":${proxy.port}`, `"port":${closedPort}`),
    };
    expect(gone.DEVOP_PRELOAD_CONFIG).toContain(`"port":${closedPort}`);
    const answers = lines(
      await run(
        PYTHON,
        [PY_CLIENT, `blocking,localhost,${echo.port},/local`, `timeout,${SERVICE_NAME},${echo.port},/`],
        gone,
      ),
    );
    // Then local connects work, and the cluster name fails as this machine's resolver fails it
    expect(answers[0]?.body).toContain('"/local"');
    expect(answers[1]?.error).toBe('gaierror');
  });
});
