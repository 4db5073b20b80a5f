// A filtered steal of a port the workload serves TLS on, on the stand-in with the real agent image: a pod serves HTTPS
// (h2 and http/1.1) with the certificate of a kubernetes.io/tls Secret it mounts; the same server runs locally under
// `devop exec --steal --http-header-filter 'x-dev: ^me$' --tls-secret NAME`; clients in another pod that verify the
// pod's certificate (the Secret's CA) get the local answer with the header and the pod's without, over both protocols.
// Without --tls-secret the filter says it cannot read TLS; a Secret that is not there is one line. The certificate and
// key are nowhere in a pod spec or devop's output.
import { spawn } from 'node:child_process';
import { copyFile, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CoreV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { makeCerts } from '../../standin/index.js';
import { DevopRun, ROOT, devopExec, startE2ETarget } from '../../testkit/e2e.js';
import { pidsOfContainer } from '../../testkit/pods.js';
import { requireRoot } from '../../testkit/root.js';
import { freePort } from '../../testkit/sockets.js';
import { standinOnly, type TargetCluster } from '../../testkit/target-cluster.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('e2e TLS filter');
const it = standinOnly("the pods mount this checkout's fixtures by hostPath");

const FIXTURES = join(ROOT, 'test', 'e2e', 'fixtures');
const HTTPS_ECHO = join(FIXTURES, 'https-echo.mjs');
const PORT = 8443;
const NAME = 'tls-echo.test';
const SECRET = 'tls-echo';

interface Answer {
  from?: string;
  /** The protocol the client got, and the one the server that answered got. */
  alpn?: string;
  serverAlpn?: string;
  dev?: string;
  error?: string;
}

describe('devop exec: a filtered steal of a TLS port with the certificate from a Secret', () => {
  let cluster: TargetCluster;
  let core: CoreV1Api;
  let namespace: string;
  let podIP: string;
  let clientPid: number;
  let certDir: string;
  let caPath: string;
  let keyPem: string;
  let certPem: string;
  const runs: DevopRun[] = [];

  /** One request from the client pod's network namespace that verifies the pod's certificate for NAME. */
  async function ask(alpn: 'h2' | 'http/1.1', dev?: string): Promise<Answer> {
    const args = ['client', `https://${podIP}:${PORT}/`, alpn, caPath, NAME, ...(dev ? [dev] : [])];
    const child = spawn('nsenter', ['-t', String(clientPid), '-n', process.execPath, HTTPS_ECHO, ...args]);
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c));
    await new Promise((r) => child.once('close', r));
    return JSON.parse(out.trim() || '{"error":"no answer"}') as Answer;
  }

  /** `devop exec --steal` of the HTTPS port for x-dev: me, the local HTTPS server as its command. */
  async function steal(extra: string[], output: 'plain' | 'json' = 'plain'): Promise<DevopRun> {
    const local = await freePort();
    const args = ['-t', 'pod/tls-server', '--steal', '-p', `${PORT}:${local}`, '--http-header-filter', 'x-dev: ^me$'];
    const command = [process.execPath, HTTPS_ECHO, 'serve', 'local', String(local), certDir, '127.0.0.1'];
    const run =
      output === 'plain'
        ? devopExec(cluster, [...args, ...extra], command)
        : new DevopRun([
            'exec',
            '--kubeconfig',
            cluster.kubeconfigPath,
            '--output',
            'json',
            ...args,
            ...extra,
            '--',
            ...command,
          ]);
    runs.push(run);
    return run;
  }

  beforeAll(async () => {
    ({ cluster, core, namespace } = await startE2ETarget('e2e-tls'));
    certDir = await mkdtemp(join(tmpdir(), 'devop-e2e-tls-'));
    const certs = await makeCerts(certDir, [`DNS:${NAME}`]);
    await copyFile(join(certDir, 'apiserver.crt'), join(certDir, 'tls.crt'));
    await copyFile(join(certDir, 'apiserver.key'), join(certDir, 'tls.key'));
    ({ caPath, keyPem, certPem } = certs);
    const b64 = (text: string): string => Buffer.from(text).toString('base64');
    await core.createNamespacedSecret({
      namespace,
      body: {
        metadata: { name: SECRET },
        type: 'kubernetes.io/tls',
        data: { 'tls.crt': b64(certPem), 'tls.key': b64(keyPem), 'ca.crt': b64(await readFile(caPath, 'utf8')) },
      },
    });
    const pod = (name: string, command: string[]) =>
      core.createNamespacedPod({
        namespace,
        body: {
          metadata: { name, labels: { app: name } },
          spec: {
            containers: [
              {
                name: 'https',
                image: 'devop.test/http-echo',
                command,
                ports: [{ containerPort: PORT }],
                volumeMounts: [
                  { name: 'fixtures', mountPath: '/fixtures', readOnly: true },
                  { name: 'tls', mountPath: '/tls', readOnly: true },
                ],
              },
            ],
            volumes: [
              { name: 'fixtures', hostPath: { path: FIXTURES } },
              { name: 'tls', secret: { secretName: SECRET } },
            ],
          },
        },
      });
    await Promise.all([
      pod('tls-server', ['node', '/fixtures/https-echo.mjs', 'serve', 'pod', String(PORT), '/tls']),
      pod('tls-client', ['sleep', '100000']),
    ]);
    const log = async (): Promise<string> =>
      String(await core.readNamespacedPodLog({ name: 'tls-server', namespace }).catch(() => ''));
    podIP = await waitFor('the HTTPS pod to listen', async () => {
      const ip = (await core.readNamespacedPod({ name: 'tls-server', namespace })).status?.podIP;
      return ip && (await log()).includes('LISTENING') ? ip : undefined;
    });
    clientPid = await waitFor("the client pod's process", async () => {
      const status = (await core.readNamespacedPod({ name: 'tls-client', namespace })).status?.containerStatuses?.[0];
      const id = status?.state?.running && status.containerID?.replace(/^[a-z]+:\/\//, '');
      return id ? (await pidsOfContainer(id))[0] : undefined;
    });
  });

  afterAll(async () => {
    await Promise.all(runs.map((r) => r.dispose()));
    await cluster?.stop();
    if (certDir) await rm(certDir, { recursive: true, force: true });
  });

  it('verifying clients get the local answer with x-dev: me, the pod answer without, over h1 and h2', async () => {
    // Given the pod answers clients that verify its certificate
    expect(await ask('h2')).toEqual({ from: 'pod', alpn: 'h2', serverAlpn: 'h2' });
    // When devop steals the port for x-dev: me with the workload's Secret, the local command serving the same cert
    const run = await steal(['--tls-secret', SECRET, '--verbose']);
    await run.ready();
    await run.waitForStdout(/LISTENING/);
    // Then with the header the local command answers, without it the pod, in the protocol the client chose
    const answers = [await ask('http/1.1', 'me'), await ask('http/1.1'), await ask('h2', 'me'), await ask('h2')];
    expect(answers, run.output).toEqual([
      { from: 'local', alpn: 'http/1.1', serverAlpn: 'http/1.1', dev: 'me' },
      { from: 'pod', alpn: 'http/1.1', serverAlpn: 'http/1.1' },
      { from: 'local', alpn: 'h2', serverAlpn: 'h2', dev: 'me' },
      { from: 'pod', alpn: 'h2', serverAlpn: 'h2' },
    ]);
    // And the certificate and key are in no pod spec (the agent's included) and nowhere in devop's output
    const pods = await core.listPodForAllNamespaces();
    const specs = JSON.stringify(pods.items.map((p) => p.spec));
    const keyLine = keyPem.split('\n')[1];
    const certLine = certPem.split('\n')[2];
    for (const secret of [keyLine, certLine, Buffer.from(keyPem).toString('base64').slice(0, 60)]) {
      expect(specs).not.toContain(secret);
      expect(run.output).not.toContain(secret);
    }
    expect(specs).toContain('"secretName":"tls-echo"'); // the server pod's own volume: the check reads the specs
    await run.dispose();
    // And neither in NDJSON (--output json, --verbose), where a matched request is an event too
    const json = await steal(['--tls-secret', SECRET, '--verbose'], 'json');
    await json.waitForStdout(/"type":"ready"/);
    await waitFor('the local server to listen', () => json.output.includes('LISTENING') || undefined);
    expect(await ask('h2', 'me')).toMatchObject({ from: 'local' });
    await waitFor("the request's event", () => /"type":"response"/.test(json.stdout) || undefined);
    for (const secret of [keyLine, certLine]) expect(json.output).not.toContain(secret);
    await json.dispose();
  });

  it('without --tls-secret: one line names the fix, and the TLS connection reaches the pod untouched', async () => {
    // Given the same filtered steal without the Secret
    const run = await steal([]);
    await run.ready();
    await run.waitForStdout(/LISTENING/);
    // When a client with the header connects in TLS
    const answer = await ask('http/1.1', 'me');
    // Then the pod answers it, and devop says once why the filter could not see it and what fixes that
    expect(answer).toEqual({ from: 'pod', alpn: 'http/1.1', serverAlpn: 'http/1.1', dev: 'me' });
    await waitFor('the line about TLS', () => run.output.includes('speaks TLS') || undefined);
    const lines = run.output.split('\n').filter((l) => l.includes('speaks TLS'));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`--tls-secret ${PORT}=SECRET`);
    await run.dispose();
  });

  it('a Secret that is not there is one line naming the fix, before the command starts', async () => {
    // When the Secret named does not exist in the target's namespace
    const run = await steal(['--tls-secret', 'no-such-secret']);
    // Then devop fails with one line naming it and how to find the right one
    expect((await run.exited).code).toBe(1);
    expect(run.stderr.trim().split('\n').slice(-1)[0]).toBe(
      `devop: Secret no-such-secret not found in namespace ${namespace} (--tls-secret) — fix: name the workload's ` +
        `kubernetes.io/tls Secret (kubectl get secrets -n ${namespace} --field-selector type=kubernetes.io/tls)`,
    );
    expect(run.stdout).not.toContain('LISTENING');
  });
});
