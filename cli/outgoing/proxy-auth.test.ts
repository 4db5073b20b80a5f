// The local proxy serves only whoever presents the session's secret: real curl and Python through the URLs devop puts
// in the child's env get through; curl without them, a SOCKS5 or HTTP client with a wrong password, a control client
// without the hello, and a stranger racing the preload to a one-shot port are refused, counted, and never dialled.
import { execFile } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exchange, recordingDialer, startHttpEcho, type Closable } from '../../testkit/outgoing.js';
import { createLocalDialer } from './dialer.js';
import { envOverrides } from '../config/env.js';
import { outgoingEnv } from './env.js';
import { startOutgoingProxy, type OutgoingProxy } from './proxy.js';

const run = promisify(execFile);

/** curl exits with this when it got no HTTP answer through a proxy that refused it (97: SOCKS handshake failed). */
const CURL_FAILED = /^(7|56|97)$/;

describe('the outgoing proxy asks for the session secret', () => {
  let http: Closable;
  let dialer: ReturnType<typeof recordingDialer>;
  let proxy: OutgoingProxy;
  const refusals: string[] = [];
  let env: Record<string, string>;

  beforeAll(async () => {
    http = await startHttpEcho('echo');
    dialer = recordingDialer(createLocalDialer({ hosts: { 'echo.default': '127.0.0.1' } }));
    proxy = await startOutgoingProxy({ dialer, onRefused: (r) => refusals.push(`${r.via}: ${r.reason}`) });
    env = outgoingEnv({}, { proxy, credentials: proxy.credentials, include: [], exclude: [] });
  });
  afterAll(async () => {
    await proxy?.close();
    await http?.close();
  });

  const dials = (): string[] => dialer.calls.filter((c) => c.op === 'connect').map((c) => c.target);
  const curl = (args: string[], extraEnv: Record<string, string> = {}) =>
    run('curl', ['-sS', '--max-time', '10', ...args], { env: { PATH: process.env.PATH, ...extraEnv } }).then(
      ({ stdout }) => ({ code: 0, stdout }),
      (err: { code: number; stdout: string }) => ({ code: err.code, stdout: err.stdout }),
    );

  it('a session secret of its own, in the child env only as proxy URL credentials and the preload token', () => {
    expect(proxy.credentials.secret).toMatch(/^[0-9a-f]{48}$/);
    const at = `devop:${proxy.credentials.secret}@127.0.0.1:${proxy.port}`;
    expect(env).toMatchObject({
      HTTP_PROXY: `http://${at}`,
      https_proxy: `http://${at}`,
      ALL_PROXY: `socks5h://${at}`,
    });
  });

  it('curl with the env devop sets gets through SOCKS5, the HTTP proxy and CONNECT', async () => {
    // Given the child env devop builds (curl reads http_proxy, HTTPS_PROXY and ALL_PROXY)
    // When curl asks for a cluster name through each way in
    const url = `http://echo.default:${http.port}/by-env`;
    const plain = await curl([url], { http_proxy: env.http_proxy });
    const tunnel = await curl(['--proxytunnel', url], { http_proxy: env.http_proxy });
    const socks = await curl([url], { ALL_PROXY: env.ALL_PROXY });
    // Then each got the service's answer
    for (const answer of [plain, tunnel, socks]) expect(answer.stdout).toContain('"url":"/by-env"');
  });

  it('Python requests and urllib send the credentials of the proxy URL', async () => {
    const url = `http://echo.default:${http.port}/python`;
    const script =
      'import json, os, sys, urllib.request\n' +
      `print(json.load(urllib.request.urlopen("${url}?urllib"))["url"])\n` +
      'try:\n  import requests\nexcept ImportError:\n  sys.exit(0)\n' +
      `print(requests.get("${url}?requests").json()["url"])\n`;
    const { stdout } = await run('python3', ['-c', script], { env: { ...process.env, ...env, NO_PROXY: '' } });
    const [urllib, requests] = stdout.trim().split('\n');
    expect(urllib).toBe('/python?urllib');
    // requests is not part of Python: checked where it is installed
    if (requests !== undefined) expect(requests).toBe('/python?requests');
  });

  it('refuses curl without the credentials, or with a wrong password, on every way in, and dials nothing', async () => {
    // Given a program that found the proxy's port but not the secret (another user of this machine)
    const before = dials().length;
    const url = `http://echo.default:${http.port}/stolen`;
    const bare = `127.0.0.1:${proxy.port}`;
    // When it uses the proxy without credentials, or with a wrong password
    const plain = await curl(['-o', '/dev/null', '-w', '%{http_code}', '-x', `http://${bare}`, url]);
    const wrong = await curl(['-o', '/dev/null', '-w', '%{http_code}', '-x', `http://devop:guess@${bare}`, url]);
    const tunnel = await curl(['--proxytunnel', '-x', `http://${bare}`, url]);
    const socks = await curl(['-x', `socks5h://${bare}`, url]);
    const socksWrong = await curl(['-x', `socks5h://devop:guess@${bare}`, url]);
    // Then HTTP says 407, CONNECT and SOCKS5 fail, no connection was dialled, and each refusal was counted
    expect(plain.stdout).toBe('407');
    expect(wrong.stdout).toBe('407');
    for (const failed of [tunnel, socks, socksWrong]) expect(String(failed.code)).toMatch(CURL_FAILED);
    expect(dials().length).toBe(before);
    expect(proxy.refused()).toBeGreaterThanOrEqual(5);
    expect(refusals).toEqual(
      expect.arrayContaining([
        'http: no Proxy-Authorization',
        'http: wrong Proxy-Authorization',
        'socks5: the SOCKS client offers no username/password',
        'socks5: wrong SOCKS username or password',
      ]),
    );
    // And no refusal names the secret
    for (const line of refusals) expect(line).not.toContain(proxy.credentials.secret);
  });

  it('refuses a control client that does not start with the token, and dials nothing', async () => {
    const before = dials().length;
    for (const first of [
      { id: 1, op: 'connect', host: 'echo.default', port: http.port },
      { id: 1, op: 'hello', token: 'guess' },
    ]) {
      const send = `${JSON.stringify(first)}\n${JSON.stringify({ id: 2, op: 'lookup', name: 'echo.default' })}\n`;
      const { received, ended } = await exchange(proxy.port, Buffer.from(send), () => false);
      expect(ended).toBe(true);
      expect(JSON.parse(received.toString())).toMatchObject({ id: 1, ok: false, code: 'EACCES' });
    }
    expect(dials().length).toBe(before);
    expect(dialer.calls.filter((c) => c.op === 'lookup')).toEqual([]);
  });

  it("gives a one-shot port's connection only to the socket the preload claims", async () => {
    // Given an authenticated control connection that asked for a connect
    const control = connect({ port: proxy.port, host: '127.0.0.1' });
    const lines = readLines(control);
    control.write(`${JSON.stringify({ id: 1, op: 'hello', token: proxy.credentials.secret })}\n`);
    control.write(`${JSON.stringify({ id: 2, op: 'connect', host: 'echo.default', port: http.port })}\n`);
    const answer = JSON.parse(await lines.next()) as { ok: boolean; port: number };
    expect(answer.ok).toBe(true);
    // When a stranger connects to the one-shot port first, then the preload's socket connects and claims
    const stranger = await connected(answer.port);
    const strangerClosed = new Promise<string>((resolve) => {
      let got = '';
      stranger.on('data', (d: Buffer) => (got += d.toString()));
      stranger.on('close', () => resolve(got));
    });
    stranger.write('GET /stranger HTTP/1.1\r\nHost: echo.default\r\nConnection: close\r\n\r\n');
    const mine = await connected(answer.port);
    control.write(`${JSON.stringify({ id: 3, op: 'claim', port: answer.port, from: mine.localPort })}\n`);
    mine.write('GET /mine HTTP/1.1\r\nHost: echo.default\r\nConnection: close\r\n\r\n');
    const got = await new Promise<string>((resolve) => {
      let text = '';
      mine.on('data', (d: Buffer) => (text += d.toString()));
      mine.on('close', () => resolve(text));
    });
    // Then the claimed socket reached the service, and the stranger was closed with nothing
    expect(got).toContain('"url":"/mine"');
    expect(await strangerClosed).toBe('');
    control.destroy();
  });
});

function connected(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1' }, () => resolve(socket));
    socket.on('error', reject);
  });
}

function readLines(socket: Socket): { next(): Promise<string> } {
  let buffered = '';
  const waiting: ((line: string) => void)[] = [];
  socket.setEncoding('utf8').on('data', (chunk: string) => {
    buffered += chunk;
    let newline = buffered.indexOf('\n');
    while (newline >= 0 && waiting.length > 0) {
      waiting.shift()?.(buffered.slice(0, newline));
      buffered = buffered.slice(newline + 1);
      newline = buffered.indexOf('\n');
    }
  });
  return { next: () => new Promise((resolve) => waiting.push(resolve)) };
}

describe("the command's outgoing env and a devop run inside the command", () => {
  it('Given the env devop gives the command, When a devop started in it reads its env overrides, Then none is there', () => {
    // Given the outgoing env with both preloads (a shell, a script or a VS Code task may run devop again in it)
    const proxy = { host: '127.0.0.1', port: 4000 };
    const vars = outgoingEnv(
      {},
      {
        proxy,
        credentials: { username: 'devop', secret: 'ab'.repeat(24) },
        include: [],
        exclude: [],
        preloadPath: '/opt/devop/dist/preload.js',
        shimPath: '/opt/devop/dist/devop-outgoing.so',
      },
    );
    // Then no variable of it is one of devop's own overrides (DEVOP_OUTGOING is outgoing.enabled: true/false)
    expect(() => envOverrides(vars)).not.toThrow();
    expect(envOverrides(vars)).toEqual({});
  });
});
