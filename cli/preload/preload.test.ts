// Tests of the Node preload (dist/preload.js) in real child processes against a local proxy and dialer: fetch, http,
// https/tls, a pg-style net.Socket, dns.lookup (callback, promises, ESM import), errors, and the include/exclude
// filters.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  PRELOAD_BUNDLE,
  recordingDialer,
  runPreloaded,
  startHttpEcho,
  startTcpEcho,
  type Closable,
} from '../../testkit/outgoing.js';
import { PRELOAD_CONFIG_ENV } from '../outgoing/control-protocol.js';
import { createLocalDialer } from '../outgoing/dialer.js';
import { outgoingEnv } from '../outgoing/env.js';
import { startOutgoingProxy, type OutgoingProxy } from '../outgoing/proxy.js';

describe('Node preload (local proxy, local dialer)', () => {
  let http: Closable;
  let tcp: Closable;
  let https: Closable & { ca: string };
  let dialer: ReturnType<typeof recordingDialer>;
  let proxy: OutgoingProxy;
  let certDir: string;

  const envFor = (
    rules: { include?: string[]; exclude?: string[] } = {},
    nodeOptions?: string,
  ): Record<string, string> =>
    outgoingEnv(nodeOptions ? { NODE_OPTIONS: nodeOptions } : {}, {
      proxy: { host: proxy.host, port: proxy.port },
      credentials: proxy.credentials,
      include: rules.include ?? [],
      exclude: rules.exclude ?? [],
      preloadPath: PRELOAD_BUNDLE,
    });

  beforeAll(async () => {
    http = await startHttpEcho('echo');
    tcp = await startTcpEcho();
    certDir = mkdtempSync(join(tmpdir(), 'devop-preload-test-'));
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-days',
        '1',
        '-subj',
        '/CN=secure.default',
        '-addext',
        'subjectAltName=DNS:secure.default',
        '-keyout',
        join(certDir, 'key.pem'),
        '-out',
        join(certDir, 'cert.pem'),
      ],
      { stdio: 'ignore' },
    );
    const cert = readFileSync(join(certDir, 'cert.pem'), 'utf8');
    const server = createHttpsServer({ key: readFileSync(join(certDir, 'key.pem')), cert }, (req, res) =>
      res.end(`secure ${req.url}`),
    );
    const httpsPort = await new Promise<number>((resolve) =>
      server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port)),
    );
    https = {
      port: httpsPort,
      ca: cert,
      close: () =>
        new Promise<void>((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    };
    // Given a "cluster" whose DNS knows echo.default, secure.default and cache.default (all served on loopback here)
    dialer = recordingDialer(
      createLocalDialer({
        hosts: {
          'echo.default': '127.0.0.1',
          'secure.default': '127.0.0.1',
          'cache.default': '127.0.0.1',
          'v6.default': ['::1', '127.0.0.1'],
        },
      }),
    );
    proxy = await startOutgoingProxy({ dialer });
  });
  afterAll(async () => {
    await proxy?.close();
    await Promise.all([http?.close(), tcp?.close(), https?.close()]);
    if (certDir) rmSync(certDir, { recursive: true, force: true });
  });

  it('the preload bundle exists (built by the test setup)', () => {
    expect(readFileSync(PRELOAD_BUNDLE, 'utf8')).toContain(PRELOAD_CONFIG_ENV);
  });

  it('plain fetch, http.get and https.get reach cluster names with no proxy support in the program', async () => {
    // When a program that knows nothing about proxies calls cluster names
    const source = `
      import http from 'node:http';
      import https from 'node:https';
      const r = await fetch('http://echo.default:${http.port}/fetch');
      console.log(JSON.stringify(await r.json()));
      const again = await fetch('http://echo.default:${http.port}/fetch-again');
      console.log(JSON.stringify(await again.json()));
      await new Promise((resolve, reject) => http.get('http://echo.default:${http.port}/http', (res) => {
        let body = ''; res.on('data', (d) => body += d); res.on('end', () => { console.log(body); resolve(); });
      }).on('error', reject));
      const tls = { host: 'secure.default', port: ${https.port}, path: '/tls', ca: process.env.TEST_CA };
      await new Promise((resolve, reject) => https.get(tls, (res) => {
        let body = ''; res.on('data', (d) => body += d);
        res.on('end', () => { console.log(JSON.stringify({ tls: body })); resolve(); });
      }).on('error', reject));
    `;
    const result = await runPreloaded(source, { ...envFor(), TEST_CA: https.ca });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const lines = result.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, string>);
    // Then each request arrived with the cluster name as Host, and TLS verified the certificate of secure.default
    expect(lines[0]).toMatchObject({ name: 'echo', url: '/fetch', host: `echo.default:${http.port}` });
    expect(lines[1]).toMatchObject({ url: '/fetch-again' });
    expect(lines[2]).toMatchObject({ url: '/http' });
    expect(lines[3]).toEqual({ tls: 'secure /tls' });
    expect(dialer.calls).toContainEqual({ op: 'connect', target: `echo.default:${http.port}` });
    expect(dialer.calls).toContainEqual({ op: 'connect', target: `secure.default:${https.port}` });
  });

  it('a pg-style new net.Socket().connect() with writes queued before the connection is up', async () => {
    const source = `
      import net from 'node:net';
      const socket = new net.Socket();
      socket.setNoDelay(true);
      socket.connect(${tcp.port}, 'cache.default');
      socket.write('PING before connect\\n');
      let got = '';
      socket.on('data', (d) => { got += d; if (got.includes('after')) socket.end(); });
      let peer;
      socket.on('connect', () => {
        peer = socket.remoteAddress + ':' + socket.remotePort;
        socket.write('PING after connect\\n');
      });
      socket.on('close', () => console.log(JSON.stringify({ got, peer })));
    `;
    const result = await runPreloaded(source, envFor());
    expect(result.code).toBe(0);
    // The peer the program sees is the one the dialer connected to (in a cluster: the service), not devop's loopback
    // port.
    expect(JSON.parse(result.stdout)).toEqual({
      got: 'PING before connect\nPING after connect\n',
      peer: `127.0.0.1:${tcp.port}`,
    });
    expect(dialer.calls).toContainEqual({ op: 'connect', target: `cache.default:${tcp.port}` });
  });

  it('dns.lookup, dns.promises.lookup and an ESM named import answer with the cluster DNS', async () => {
    const source = `
      import dns from 'node:dns';
      import { lookup } from 'node:dns';
      import { lookup as lookupP } from 'node:dns/promises';
      const cb = await new Promise((resolve) =>
        dns.lookup('echo.default', (err, address, family) => resolve({ err: err?.code, address, family })));
      const named = await new Promise((resolve) => lookup('v6.default', { all: true }, (err, all) => resolve(all)));
      const v4only = await lookupP('v6.default', { family: 4 });
      console.log(JSON.stringify({ cb, named, v4only }));
    `;
    const result = await runPreloaded(source, envFor());
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({
      cb: { address: '127.0.0.1', family: 4 },
      named: [
        { address: '::1', family: 6 },
        { address: '127.0.0.1', family: 4 },
      ],
      v4only: { address: '127.0.0.1', family: 4 },
    });
  });

  it('a name the cluster does not know gives ENOTFOUND (fetch, net.connect, dns), and a closed port ECONNREFUSED', async () => {
    const source = `
      import net from 'node:net';
      import { lookup } from 'node:dns/promises';
      const out = {};
      try { await fetch('http://nosuch.default:${http.port}/'); } catch (e) { out.fetch = e.cause?.code; }
      try { await lookup('nosuch.default'); } catch (e) { out.lookup = [e.code, e.syscall, e.hostname]; }
      const failure = (port, host, keys) =>
        new Promise((resolve) => net.connect(port, host).on('error', (e) => resolve(keys.map((k) => e[k]))));
      out.net = await failure(80, 'nosuch.default', ['code', 'syscall']);
      out.refused = await failure(9, 'echo.default', ['code', 'syscall', 'message']);
      console.log(JSON.stringify(out));
    `;
    const result = await runPreloaded(source, envFor());
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({
      fetch: 'ENOTFOUND',
      lookup: ['ENOTFOUND', 'getaddrinfo', 'nosuch.default'],
      net: ['ENOTFOUND', 'getaddrinfo'],
      refused: ['ECONNREFUSED', 'connect', 'connect ECONNREFUSED echo.default:9'],
    });
  });

  it('an excluded host is dialled locally (the cluster is never asked)', async () => {
    // Given db.corp.test excluded; the program brings its own resolver so that no real DNS query leaves the machine
    const before = dialer.calls.length;
    const source = `
      import net from 'node:net';
      const lookup = (host, opts, cb) =>
        opts.all ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(null, '127.0.0.1', 4);
      let remote;
      const socket = net.connect({ host: 'db.corp.test', port: ${tcp.port}, lookup }, () => {
        remote = socket.remoteAddress + ':' + socket.remotePort;
        socket.end('local bytes');
      });
      let got = '';
      socket.on('data', (d) => got += d);
      socket.on('close', () => console.log(JSON.stringify({ got, remote })));
    `;
    const result = await runPreloaded(source, envFor({ exclude: ['*.corp.test'] }));
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({ got: 'local bytes', remote: `127.0.0.1:${tcp.port}` });
    expect(dialer.calls.slice(before).filter((call) => call.target.includes('corp.test'))).toEqual([]);
  });

  it('with include rules, only what they name goes through the cluster', async () => {
    const before = dialer.calls.length;
    const source = `
      import net from 'node:net';
      const lookup = (host, opts, cb) =>
        opts.all ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(null, '127.0.0.1', 4);
      const viaCluster = await fetch('http://echo.default:${http.port}/in').then((r) => r.json());
      const local = await new Promise((resolve) => {
        const s = net.connect({ host: 'elsewhere.test', port: ${tcp.port}, lookup }, () => s.end('x'));
        s.on('data', () => undefined); s.on('close', () => resolve('local ok'));
      });
      console.log(JSON.stringify({ viaCluster: viaCluster.url, local }));
    `;
    const result = await runPreloaded(source, envFor({ include: ['*.default'] }));
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({ viaCluster: '/in', local: 'local ok' });
    const asked = dialer.calls.slice(before).map((call) => call.target);
    expect(asked).toContain(`echo.default:${http.port}`);
    expect(asked.some((target) => target.includes('elsewhere.test'))).toBe(false);
  });

  it('keeps the NODE_OPTIONS the command already had', async () => {
    const env = envFor({}, '--max-old-space-size=123');
    expect(env.NODE_OPTIONS).toMatch(/^--max-old-space-size=123 --import=file:\/\//);
    const result = await runPreloaded(
      // The limit is the old space asked for plus a young generation whose size depends on Node's version (171 MiB in
      // all on Node 20, 315 on 24), far below the default of several GiB either way.
      `import v8 from 'node:v8'; const r = await fetch('http://echo.default:${http.port}/opts'); ` +
        `console.log(Math.round(v8.getHeapStatistics().heap_size_limit / 2 ** 20) <= 1024, (await r.json()).url);`,
      env,
    );
    expect(result.code).toBe(0);
    expect(result.stdout.trim()).toBe('true /opts');
  });

  it('when devop is gone, a cluster connect fails with ECONNREFUSED instead of hanging', async () => {
    const gone = await startOutgoingProxy({ dialer });
    const env = outgoingEnv(
      {},
      {
        proxy: { host: gone.host, port: gone.port },
        credentials: gone.credentials,
        include: [],
        exclude: [],
        preloadPath: PRELOAD_BUNDLE,
      },
    );
    await gone.close();
    const result = await runPreloaded(
      `try { await fetch('http://echo.default:${http.port}/'); } catch (e) { console.log(e.cause?.code); }`,
      env,
    );
    expect(result.code).toBe(0);
    expect(result.stdout.trim()).toBe('ECONNREFUSED');
  });
});
