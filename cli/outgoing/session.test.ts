// Unit tests of the outgoing session: the child env it adds (proxy variables, both preloads, --outgoing-netns), remote
// files under DEVOP_ROOT (and their removal), and the user errors for bad rules and missing remote files. Local
// dialer, real temp directories.
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isUserError } from '../../shared/errors.js';
import { createLocalDialer, withLocalNames } from './dialer.js';
import { recordingDialer } from '../../testkit/outgoing.js';
import { PRELOAD_CONFIG_ENV } from './control-protocol.js';
import { apiServerRule, startOutgoing } from './session.js';
import { fetchRemoteFiles, normalizeRemotePath } from './remote-files.js';

const TOKEN_PATH = '/var/run/secrets/kubernetes.io/serviceaccount/token';

describe('outgoing session', () => {
  it('gives the child proxy env, the preload and DEVOP_ROOT with the remote files, and removes them on close', async () => {
    // Given a pod filesystem with a service-account token
    const dialer = createLocalDialer({ files: { [TOKEN_PATH]: 'pod-token-123', '/etc/app/config.yaml': 'a: 1\n' } });
    // When the session starts with two remote files and an exclude
    const outgoing = await startOutgoing({
      dialer,
      remoteFiles: [TOKEN_PATH, '/etc/app//config.yaml'],
      exclude: ['*.corp.example'],
      alwaysLocal: ['10.0.0.1'],
    });
    try {
      const env = outgoing.env({ NODE_OPTIONS: '--enable-source-maps', LD_PRELOAD: '/opt/other.so' });
      const port = outgoing.proxy!.port;
      const secret = outgoing.proxy!.credentials.secret;
      const at = `devop:${secret}@127.0.0.1:${port}`;
      // Then the proxy variables point at the local proxy with the session's credentials (names resolved by the
      // proxy: socks5h)
      expect(env).toMatchObject({
        HTTP_PROXY: `http://${at}`,
        http_proxy: `http://${at}`,
        HTTPS_PROXY: `http://${at}`,
        https_proxy: `http://${at}`,
        ALL_PROXY: `socks5h://${at}`,
        all_proxy: `socks5h://${at}`,
        NO_PROXY: 'localhost,127.0.0.1,::1,.corp.example,10.0.0.1',
      });
      expect(env.NODE_OPTIONS).toMatch(/^--enable-source-maps --import=file:\/\/\S+\/dist\/preload\.js$/);
      // And dynamically linked programs preload the shim after the child's own (built on Linux by npm run build)
      if (process.platform === 'linux')
        expect(env.LD_PRELOAD).toMatch(/^\/opt\/other\.so:\/\S+\/dist\/devop-outgoing\.so$/);
      expect(JSON.parse(env[PRELOAD_CONFIG_ENV])).toEqual({
        proxy: { host: '127.0.0.1', port },
        include: [],
        exclude: ['*.corp.example', '10.0.0.1'],
        token: secret,
      });
      // And the remote files are under DEVOP_ROOT with the same relative paths, readable by the user only
      const root = env.DEVOP_ROOT;
      expect(readFileSync(join(root, TOKEN_PATH), 'utf8')).toBe('pod-token-123');
      expect(readFileSync(join(root, '/etc/app/config.yaml'), 'utf8')).toBe('a: 1\n');
      expect(statSync(join(root, TOKEN_PATH)).mode & 0o777).toBe(0o600);
      expect(outgoing.remoteFiles?.paths).toEqual([TOKEN_PATH, '/etc/app/config.yaml']);
      // When the session closes / Then DEVOP_ROOT is gone
      await outgoing.close();
      expect(existsSync(root)).toBe(false);
    } finally {
      await outgoing.close();
    }
  });

  it('a remote file that does not exist is a user error naming it, and nothing is left behind', async () => {
    const dialer = createLocalDialer({ files: { '/etc/present.conf': 'x' } });
    const err = await startOutgoing({ dialer, remoteFiles: ['/etc/missing.conf'] }).catch((e: unknown) => e);
    expect(isUserError(err)).toBe(true);
    expect((err as Error).message).toBe('remote file /etc/missing.conf does not exist in the target container');
    // The partial session directory is removed as well
    const parent = mkdtempSync(join(tmpdir(), 'devop-remote-test-'));
    try {
      await expect(fetchRemoteFiles(dialer, ['/etc/present.conf', '/etc/missing.conf'], { parent })).rejects.toThrow(
        /missing\.conf/,
      );
      expect(readdirSync(parent)).toEqual([]);
    } finally {
      rmSync(parent, { recursive: true, force: true });
    }
  });

  it('bad rules and relative remote paths are user errors with the accepted forms', async () => {
    const dialer = createLocalDialer();
    const err = await startOutgoing({ dialer, exclude: ['10.0.0.0/40'] }).catch((e: unknown) => e);
    expect(isUserError(err)).toBe(true);
    expect((err as Error).message).toContain('--outgoing-exclude: bad outgoing rule "10.0.0.0/40"');
    expect(() => normalizeRemotePath('etc/x')).toThrow(/not an absolute path/);
    expect(() => normalizeRemotePath('/')).toThrow(/root directory/);
  });

  it('with the proxy env and both preloads off (and no remote files), the child env gets nothing', async () => {
    const outgoing = await startOutgoing({
      dialer: createLocalDialer(),
      proxyEnv: false,
      nodePreload: false,
      nativePreload: false,
    });
    try {
      expect(outgoing.env({})).toEqual({});
    } finally {
      await outgoing.close();
    }
  });

  it('keeps the kube API server of the kubeconfig local', () => {
    expect(apiServerRule('https://127.0.0.1:6443')).toBe('127.0.0.1');
    expect(apiServerRule('https://api.example.com')).toBe('api.example.com');
    expect(apiServerRule('https://[fd00::1]:6443')).toBe('fd00::1');
    expect(apiServerRule(undefined)).toBeUndefined();
  });

  it('with dns.enabled off, names are resolved on this machine and only the address goes to the pod', async () => {
    // Given a pod dialer that would know no names at all
    const pod = recordingDialer(createLocalDialer({ hosts: {} }));
    const dialer = withLocalNames(pod);
    // When a name of this machine's /etc/hosts is looked up and dialled (nothing listens on port 9: refused)
    const [first] = await dialer.lookup('localhost', 4);
    expect(first).toEqual({ address: '127.0.0.1', family: 4 });
    await expect(dialer.connect('localhost', 9)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    // Then the pod side was asked for an address, never for the name
    expect(pod.calls.filter((call) => call.op === 'connect').map((call) => call.target)).toEqual([
      expect.stringMatching(/^(127\.0\.0\.1|::1):9$/),
    ]);
    expect(pod.calls.some((call) => call.op === 'lookup')).toBe(false);
  });

  it.skipIf(process.platform !== 'linux')(
    '--outgoing-netns: the command starts under devop-netns with the ports to publish, and without the LD_PRELOAD shim',
    async () => {
      // When the session starts with the network namespace
      const outgoing = await startOutgoing({ dialer: createLocalDialer(), netns: true });
      try {
        // Then the command is started under dist/devop-netns, the local ports published, then `--`
        expect(outgoing.launcher?.([8080, 9090])).toEqual([
          expect.stringMatching(/\/dist\/devop-netns$/),
          '--publish',
          '8080',
          '--publish',
          '9090',
          '--',
        ]);
        // And its env names devop's socket and the session's secret, and preloads no shim (its UDP relays would be out
        // of the namespace's reach)
        const env = outgoing.env({});
        expect(env.DEVOP_NETNS_SOCKET).toMatch(/outgoing\.sock$/);
        expect(env.DEVOP_NETNS_TOKEN).toBe(outgoing.proxy?.credentials.secret);
        expect(env.LD_PRELOAD).toBeUndefined();
      } finally {
        await outgoing.close();
      }
    },
  );

  it('--outgoing-netns while outgoing is off: one warning, no namespace', async () => {
    const lines: string[] = [];
    const reporter = {
      emit: (event: { type: string; message?: string }) => void lines.push(event.message ?? ''),
      capturesChildOutput: false,
      close: async () => undefined,
    };
    // When outgoing is off and the namespace asked for
    const outgoing = await startOutgoing({ dialer: createLocalDialer(), netns: true, enabled: false, reporter });
    // Then the command runs as it is, and one line says why
    expect(outgoing.launcher).toBeUndefined();
    expect(lines.filter((line) => line.includes('--outgoing-netns'))).toHaveLength(1);
    await outgoing.close();
  });
});
