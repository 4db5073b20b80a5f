// kubectl 1.27 to 1.33, unmodified, against the stand-in API server (no node): the create generators on all seven;
// get -o json, apply then apply changed (client-side apply with strategic merge), delete cascading to pods and auth
// can-i with the restricted token (the long round) on 1.29 and the newest; apply on 1.27 (which reads /openapi/v2) is
// in openapi.test.ts.
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { waitFor } from '../../testkit/wait.js';

const run = promisify(execFile);
/** Every kubectl installed (scripts/setup.sh): each runs the cheap round. */
const KUBECTL_VERSIONS = ['1.27', '1.28', '1.29', '1.30', '1.31', '1.32', '1.33'];
/** The long round on two versions only, to keep the suite's time reasonable (declared for those two alone). */
const LONG_ROUND_VERSIONS = new Set(['1.29', '1.33']);
const kubectlPath = (v: string) => `/usr/lib/google-cloud-sdk/bin/kubectl.${v}`;

/** Each round runs a dozen kubectl processes; on a loaded 2-core machine that takes a while. */
const SYSTEM_TEST_TIMEOUT_MS = 120_000;
let cluster: ClusterHandle;
let dir: string;

async function kubectl(
  v: string,
  args: string[],
  opts: { kubeconfig?: string } = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await run(kubectlPath(v), args, {
      env: { ...process.env, KUBECONFIG: opts.kubeconfig ?? cluster.kubeconfigPath, HOME: dir },
      timeout: 60_000,
    });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof err.code === 'number' ? err.code : -1, stdout: err.stdout ?? '', stderr: err.stderr ?? '' };
  }
}

function manifest(ns: string, greeting: string, replicas: number, extraEnv: string): string {
  return `apiVersion: v1
kind: Namespace
metadata:
  name: ${ns}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  namespace: ${ns}
data:
  GREETING: ${greeting}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: ${ns}
spec:
  replicas: ${replicas}
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: devop.test/http-echo
        ports: [{containerPort: 8080, name: http}]
        env:
        - {name: PORT, value: "8080"}
        - name: GREETING
          valueFrom: {configMapKeyRef: {name: web-config, key: GREETING}}${extraEnv}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: ${ns}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: http}]
`;
}

beforeAll(async () => {
  for (const v of KUBECTL_VERSIONS)
    if (!existsSync(kubectlPath(v))) throw new Error(`kubectl ${v} is missing at ${kubectlPath(v)}`);
  dir = mkdtempSync(join(tmpdir(), 'devop-kubectl-'));
  cluster = await startCluster({ kubelet: false });
});

afterAll(async () => {
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('kubectl against the stand-in API server', () => {
  for (const v of KUBECTL_VERSIONS) {
    if (LONG_ROUND_VERSIONS.has(v))
      it(
        `kubectl ${v}: apply, apply changed, get -o json, delete cascading, auth can-i`,
        async () => {
          const ns = `k${v.replace('.', '')}`;
          const first = join(dir, `${ns}-1.yaml`);
          const second = join(dir, `${ns}-2.yaml`);
          writeFileSync(first, manifest(ns, 'hello', 2, ''));
          writeFileSync(second, manifest(ns, 'bonjour', 3, '\n        - {name: EXTRA, value: "1"}'));

          const a1 = await kubectl(v, ['apply', '-f', first]);
          expect(a1.stderr).toBe('');
          expect(a1.stdout).toContain(`namespace/${ns} created`);
          expect(a1.stdout).toContain('deployment.apps/web created');
          await waitFor(
            '2 pods',
            async () =>
              JSON.parse((await kubectl(v, ['get', 'pods', '-n', ns, '-o', 'json'])).stdout).items.length === 2,
          );

          const again = await kubectl(v, ['apply', '-f', first]);
          expect(again.stdout).toContain('deployment.apps/web unchanged');
          const a2 = await kubectl(v, ['apply', '-f', second]);
          expect(a2.stderr).toBe('');
          expect(a2.stdout).toContain('configmap/web-config configured');
          expect(a2.stdout).toContain('deployment.apps/web configured');
          expect(a2.stdout).toContain('service/web unchanged');

          const got = await kubectl(v, ['get', 'pods,deploy', '-n', ns, '-o', 'json']);
          expect(got.code).toBe(0);
          const list = JSON.parse(got.stdout);
          expect(list.kind).toBe('List');
          const deploy = list.items.find((i: any) => i.kind === 'Deployment');
          expect(deploy.spec.replicas).toBe(3);
          expect(deploy.spec.template.spec.containers[0].env.map((e: any) => e.name)).toEqual([
            'PORT',
            'GREETING',
            'EXTRA',
          ]);
          expect(deploy.metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']).toContain('"EXTRA"');
          expect(list.items.some((i: any) => i.kind === 'Pod' && i.metadata.labels.app === 'web')).toBe(true);
          const cm = JSON.parse((await kubectl(v, ['get', 'configmap', 'web-config', '-n', ns, '-o', 'json'])).stdout);
          expect(cm.data).toEqual({ GREETING: 'bonjour' });
          await waitFor('3 pods of the new template', async () => {
            const pods = JSON.parse((await kubectl(v, ['get', 'pods', '-n', ns, '-o', 'json'])).stdout).items;
            return (
              pods.length === 3 && pods.every((p: any) => p.spec.containers[0].env.some((e: any) => e.name === 'EXTRA'))
            );
          });

          const table = await kubectl(v, ['get', 'deploy,svc', '-n', ns]);
          expect(table.stdout).toMatch(/deployment\.apps\/web\s+0\/3\s+3\s+0\s+/);
          expect(table.stdout).toMatch(/service\/web\s+ClusterIP\s+10\.\d+\.\d+\.\d+\s+<none>\s+80\/TCP/);

          const del = await kubectl(v, ['delete', 'deploy', 'web', '-n', ns]);
          expect(del.stdout).toContain('deployment.apps "web" deleted');
          await waitFor('pods and replica sets gone', async () => {
            const out = JSON.parse((await kubectl(v, ['get', 'pods,rs', '-n', ns, '-o', 'json'])).stdout);
            return out.items.length === 0;
          });

          const yes = await kubectl(v, ['auth', 'can-i', 'list', 'pods', '-n', 'default'], {
            kubeconfig: cluster.restrictedKubeconfigPath,
          });
          expect([yes.code, yes.stdout.trim()]).toEqual([0, 'yes']);
          const noJobs = await kubectl(v, ['auth', 'can-i', 'create', 'jobs', '-n', 'default'], {
            kubeconfig: cluster.restrictedKubeconfigPath,
          });
          expect([noJobs.code, noJobs.stdout.trim()]).toEqual([1, 'no']);
          const noPf = await kubectl(v, ['auth', 'can-i', 'create', 'pods/portforward', '-n', 'default'], {
            kubeconfig: cluster.restrictedKubeconfigPath,
          });
          expect([noPf.code, noPf.stdout.trim()]).toEqual([1, 'no']);
          const forbidden = await kubectl(v, ['get', 'deploy', '-n', 'default'], {
            kubeconfig: cluster.restrictedKubeconfigPath,
          });
          expect(forbidden.code).toBe(1);
          expect(forbidden.stderr).toContain(
            'Error from server (Forbidden): deployments.apps is forbidden: User "devop-restricted" cannot list ' +
              'resource "deployments" in API group "apps" in the namespace "default"',
          );
        },
        SYSTEM_TEST_TIMEOUT_MS,
      );
    it(
      `kubectl ${v}: create generators (namespace, configmap, secret, deployment, job, service)`,
      async () => {
        const ns = `gen${v.replace('.', '')}`;
        const ok = async (args: string[]) => {
          const r = await kubectl(v, args);
          expect(r.stderr).toBe('');
          return r.stdout;
        };
        expect(await ok(['create', 'namespace', ns])).toBe(`namespace/${ns} created\n`);
        await ok(['create', 'configmap', 'cfg', '-n', ns, '--from-literal=a=1']);
        await ok(['create', 'secret', 'generic', 'sec', '-n', ns, '--from-literal=pw=s3cret']);
        await ok([
          'create',
          'deployment',
          'dep',
          '-n',
          ns,
          '--image=devop.test/http-echo',
          '--port=8080',
          '--replicas=2',
        ]);
        await ok(['create', 'job', 'once', '-n', ns, '--image=busybox', '--', 'sh', '-c', 'echo hi']);
        await ok(['create', 'service', 'clusterip', 'dep', '-n', ns, '--tcp=80:8080']);
        const get = async (what: string) => JSON.parse(await ok(['get', what, '-n', ns, '-o', 'json']));
        expect((await get('configmap/cfg')).data).toEqual({ a: '1' });
        expect(Buffer.from((await get('secret/sec')).data.pw, 'base64').toString()).toBe('s3cret');
        const dep = await get('deployment/dep');
        expect(dep.spec.replicas).toBe(2);
        expect(dep.spec.strategy.type).toBe('RollingUpdate');
        expect(dep.spec.template.spec.containers[0]).toMatchObject({
          name: 'http-echo',
          image: 'devop.test/http-echo',
          ports: [{ containerPort: 8080, protocol: 'TCP' }],
          imagePullPolicy: 'Always',
        });
        const job = await get('job/once');
        expect(job.spec.template.spec).toMatchObject({
          restartPolicy: 'Never',
          containers: [{ name: 'once', command: ['sh', '-c', 'echo hi'] }],
        });
        const svc = await get('service/dep');
        expect(svc.spec).toMatchObject({
          type: 'ClusterIP',
          selector: { app: 'dep' },
          ports: [{ port: 80, targetPort: 8080, protocol: 'TCP' }],
        });
        await waitFor(
          'deployment and job pods',
          async () => JSON.parse(await ok(['get', 'pods', '-n', ns, '-o', 'json'])).items.length === 3,
        );
      },
      SYSTEM_TEST_TIMEOUT_MS,
    );
  }
});
