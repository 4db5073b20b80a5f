// The echo-controller walkthrough (docs/examples.md) end to end on the stand-in: the controller runs locally against the
// cluster, turns an Echo into a Deployment with Ready pods, follows changes, recreates what is deleted, honours its finalizer.
import { KubeConfig, Watch } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../helpers/root.js';
import { startCluster } from '../cluster/index.js';
import { Kubectl, LocalProcess, eventually, exampleImages } from './harness.js';

requireRoot('examples: echo-controller');

type Cluster = Awaited<ReturnType<typeof startCluster>>;
/** Each step waits for pods to become Ready with generous deadlines (shared CI machine); this bounds the whole step. */
const STEP_TIMEOUT_MS = 300_000;

describe('echo-controller walkthrough', () => {
  let cluster: Cluster;
  let kubectl: Kubectl;
  let controller: LocalProcess | undefined;
  const extra: LocalProcess[] = [];

  const env = (): NodeJS.ProcessEnv => ({ ...process.env, KUBECONFIG: cluster.kubeconfigPath });
  const startController = (...args: string[]): LocalProcess =>
    new LocalProcess('npx', ['tsx', 'examples/echo-controller/src/main.ts', ...args], env());

  /** "<spec.replicas> <status.readyReplicas> <uid>" of the Echo's Deployment, or undefined while it does not exist. */
  const deployment = async (): Promise<{ replicas: string; ready: string; uid: string } | undefined> => {
    const r = await kubectl.run('get', 'deployment', 'hello', '-n', 'default', '-o', 'jsonpath={.spec.replicas} {.status.readyReplicas} {.metadata.uid}');
    if (r.code !== 0) return undefined;
    const [replicas, ready, uid] = r.stdout.split(' ');
    return { replicas, ready, uid };
  };
  const deploymentWith = (replicas: number, otherThanUid?: string) =>
    eventually(`deployment hello with ${replicas} ready replicas`, async () => {
      const d = await deployment();
      return d && d.replicas === String(replicas) && d.ready === String(replicas) && d.uid !== otherThanUid ? d : undefined;
    });

  beforeAll(async () => {
    cluster = await startCluster({ images: exampleImages() });
    kubectl = new Kubectl(cluster.kubeconfigPath);
  });

  afterAll(async () => {
    await Promise.all([controller, ...extra].map((p) => p?.stop('SIGKILL')));
    kubectl?.dispose();
    await cluster?.stop();
  }, STEP_TIMEOUT_MS);

  it('installs the CRD and RBAC', async () => {
    const applied = await kubectl.ok('apply', '-f', 'examples/echo-controller/manifests/crd.yaml', '-f', 'examples/echo-controller/manifests/rbac.yaml');
    expect(applied).toContain('customresourcedefinition.apiextensions.k8s.io/echoes.example.com created');
    expect(applied).toContain('clusterrole.rbac.authorization.k8s.io/echo-controller created');
    await kubectl.ok('wait', '--for=condition=Established', 'crd/echoes.example.com', '--timeout=60s');
    // The short name works and there is nothing yet.
    const none = await kubectl.run('get', 'echo', '-n', 'default');
    expect(none.code).toBe(0);
    expect(none.stderr).toContain('No resources found in default namespace.');
  }, STEP_TIMEOUT_MS);

  it('an Echo with replicas 2 becomes a Deployment with 2 Ready pods, and the Echo reports them', async () => {
    // Given the controller running locally with the cluster's kubeconfig
    controller = startController();
    // When an Echo asks for 2 replicas
    expect(await kubectl.ok('apply', '-f', 'examples/echo-controller/manifests/echo.yaml')).toContain('echo.example.com/hello created');
    // Then its Deployment runs 2 Ready pods of the echo image, owned by the Echo
    await deploymentWith(2);
    expect(await kubectl.ok('get', 'deployment', 'hello', '-n', 'default')).toMatch(/^NAME\s+READY\s+UP-TO-DATE\s+AVAILABLE\s+AGE\nhello\s+2\/2\s+2\s+2\s/);
    const dep = JSON.parse(await kubectl.ok('get', 'deployment', 'hello', '-n', 'default', '-o', 'json'));
    expect(dep.spec.template.spec.containers[0].image).toBe('devop.test/http-echo');
    expect(dep.metadata.ownerReferences).toMatchObject([{ apiVersion: 'example.com/v1', kind: 'Echo', name: 'hello', controller: true }]);
    // And the Echo holds the finalizer and a status with 2 ready at generation 1
    const echo = await eventually('echo status ready 2', async () => {
      const e = JSON.parse(await kubectl.ok('get', 'echo', 'hello', '-n', 'default', '-o', 'json'));
      return e.status?.readyReplicas === 2 ? e : undefined;
    });
    expect(echo.metadata.finalizers).toEqual(['example.com/echo-deployment']);
    expect(echo.status).toEqual({ replicas: 2, readyReplicas: 2, observedGeneration: 1 });
    expect(await kubectl.ok('get', 'echo', 'hello', '-n', 'default')).toMatch(/^NAME\s+REPLICAS\s+READY\s+AGE\nhello\s+2\s+2\s/);
  }, STEP_TIMEOUT_MS);

  it('changing replicas to 3 updates the Deployment in place', async () => {
    const before = await deployment();
    await kubectl.ok('patch', 'echo', 'hello', '-n', 'default', '--type=merge', '-p', '{"spec":{"replicas":3}}');
    const after = await deploymentWith(3);
    expect(after.uid).toBe(before?.uid);
    await eventually('echo status to observe generation 2 with 3 ready', async () => {
      const s = JSON.parse(await kubectl.ok('get', 'echo', 'hello', '-n', 'default', '-o', 'jsonpath={.status}'));
      return s.observedGeneration === 2 && s.readyReplicas === 3 ? s : undefined;
    });
  }, STEP_TIMEOUT_MS);

  it('a deleted Deployment is created again', async () => {
    const before = await deployment();
    expect(await kubectl.ok('delete', 'deployment', 'hello', '-n', 'default')).toContain('deployment.apps "hello" deleted');
    const again = await deploymentWith(3, before?.uid);
    expect(again.uid).not.toBe(before?.uid);
  }, STEP_TIMEOUT_MS);

  it('deleting the Echo removes its Deployment first, then the Echo', async () => {
    // Given a watch on Echoes that checks, when the Echo is finally gone, whether its Deployment still exists
    const kc = new KubeConfig();
    kc.loadFromFile(cluster.kubeconfigPath);
    let deploymentWhenEchoGone: boolean | undefined;
    const echoGone = new Promise<void>((resolve, reject) => {
      void new Watch(kc)
        .watch('/apis/example.com/v1/namespaces/default/echoes', {}, (type, obj: { metadata?: { name?: string } }) => {
          if (type !== 'DELETED' || obj.metadata?.name !== 'hello') return;
          void deployment().then((d) => {
            deploymentWhenEchoGone = d !== undefined;
            resolve();
          }, reject);
        }, (err: unknown) => err && reject(err))
        .then((abort) => echoGone.finally(() => abort.abort()));
    });
    // When the Echo is deleted (kubectl waits until it is gone, i.e. until the finalizer is removed)
    expect(await kubectl.ok('delete', 'echo', 'hello', '-n', 'default', '--timeout=120s')).toContain('echo.example.com "hello" deleted');
    await echoGone;
    // Then the Deployment was already gone when the Echo went, and neither exists now
    expect(deploymentWhenEchoGone).toBe(false);
    expect(await deployment()).toBeUndefined();
    expect((await kubectl.run('get', 'echo', 'hello', '-n', 'default')).stderr).toContain('NotFound');
    const log = controller!.stdout;
    expect(log.indexOf('default/hello: echo deleted, delete deployment')).toBeGreaterThan(-1);
    expect(log.indexOf('default/hello: deployment gone, remove finalizer')).toBeGreaterThan(log.indexOf('default/hello: echo deleted, delete deployment'));
    await controller!.stop('SIGINT');
  }, STEP_TIMEOUT_MS);

  it('with --leader-elect, one of two controllers leads and the other takes over when it stops', async () => {
    // Given two controllers that elect a leader with the Lease default/echo-controller
    const first = startController('--leader-elect');
    extra.push(first);
    const holder = () =>
      kubectl.run('get', 'lease', 'echo-controller', '-n', 'default', '-o', 'jsonpath={.spec.holderIdentity}').then((r) => (r.code === 0 && r.stdout ? r.stdout : undefined));
    const identityOf = (p: LocalProcess) => /lease default\/echo-controller acquired by (\S+)/.exec(p.stdout)?.[1];
    const firstIdentity = await eventually('the first controller to acquire the lease', async () => identityOf(first));
    expect(await eventually('the lease to name the first controller', holder)).toBe(firstIdentity);
    const second = startController('--leader-elect');
    extra.push(second);
    await eventually('the second controller to wait', async () => (second.stdout.includes('is held by another replica; waiting') ? true : undefined));

    // When the leader stops (it hands the lease back)
    await first.stop('SIGTERM');
    // Then the second one leads and reconciles
    const secondIdentity = await eventually('the second controller to acquire the lease', async () => identityOf(second));
    expect(secondIdentity).not.toBe(firstIdentity);
    expect(await eventually('the lease to name the second controller', async () => ((await holder()) === secondIdentity ? true : undefined))).toBe(true);
    await kubectl.ok('apply', '-f', 'examples/echo-controller/manifests/echo.yaml');
    await deploymentWith(2);
    expect(second.stdout).toContain('default/hello: create deployment (replicas 2)');
  }, STEP_TIMEOUT_MS);
});
