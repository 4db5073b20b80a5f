// The echo-controller walkthrough (docs/walkthrough.md) end to end on the stand-in (or a real cluster:
// testkit/target-cluster.ts): the controller runs in the cluster (two replicas, one leading); a new version runs
// beside the in-cluster leader under `devop exec --shadow` (its writes are shown, not stored); then it runs locally
// under `devop exec -t deploy/echo-controller --replace` (the cluster's replicas go to 0 meanwhile), where it turns
// an Echo into a Deployment with Ready pods, follows changes, recreates what is deleted, honours its finalizer; when
// devop stops the replicas come back and take the lease — and after a kill -9 of devop, the in-cluster guard brings
// them back.
// Last, its validating webhook runs locally under `devop exec -t validatingwebhookconfiguration/echo-controller`:
// kubectl's writes are refused by the local process, and while it is stopped (SIGSTOP, as in a debugger) the pods
// answer in time.
import { KubeConfig, Watch } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { agentImageEnv, externalTarget, startTargetCluster, type TargetCluster } from '../../testkit/target-cluster.js';
import { ANSWERED_IDLE_CLOSE_MS } from '../../agent/incoming/answer-fallback.js';
import { LEASE_DURATION_SECONDS } from '../../cli/kube/steal-lease.js';
import { Kubectl, LocalProcess, eventually } from './harness.js';
import { freePort } from '../../testkit/sockets.js';

requireRoot('examples: echo-controller');

/**
 * Loaded into devop under --shadow: says on stderr when anything calls Node's util._extend, which http-proxy (the
 * shadow proxy) would without the bundle's util (scripts/shims/util.cjs), and which prints a deprecation warning from
 * Node 22.
 */
const UTIL_EXTEND_CALLED = "Node's util._extend called";
const UTIL_EXTEND_WATCH =
  'data:text/javascript,import util from "node:util"; const extend = util._extend; ' +
  `util._extend = function (...args) { process.stderr.write("${UTIL_EXTEND_CALLED}\\n"); ` +
  'return extend.apply(this, args); };';
/** The image the shadowed controller puts in its Deployments: what "a new version" changes in this walkthrough. */
const SHADOW_IMAGE = 'devop.test/http-echo:next';

/** Each step waits for pods to become Ready with generous deadlines (shared CI machine); this bounds the whole step. */
const STEP_TIMEOUT_MS = 300_000;

describe('echo-controller walkthrough', () => {
  let cluster: TargetCluster;
  let kubectl: Kubectl;
  let devop: LocalProcess | undefined;

  /** spec.replicas, status.readyReplicas and uid of the Echo's Deployment, or undefined while it does not exist. */
  const deployment = async (): Promise<{ replicas: string; ready: string; uid: string } | undefined> => {
    const r = await kubectl.run(
      'get',
      'deployment',
      'hello',
      '-n',
      'default',
      '-o',
      'jsonpath={.spec.replicas} {.status.readyReplicas} {.metadata.uid}',
    );
    if (r.code !== 0) return undefined;
    const [replicas, ready, uid] = r.stdout.split(' ');
    return { replicas, ready, uid };
  };
  const deploymentWith = (replicas: number, otherThanUid?: string) =>
    eventually(`deployment hello with ${replicas} ready replicas`, async () => {
      const d = await deployment();
      return d && d.replicas === String(replicas) && d.ready === String(replicas) && d.uid !== otherThanUid
        ? d
        : undefined;
    });
  const leaseHolder = () =>
    kubectl
      .run('get', 'lease', 'echo-controller', '-n', 'default', '-o', 'jsonpath={.spec.holderIdentity}')
      .then((r) => (r.code === 0 && r.stdout ? r.stdout : undefined));
  /** The in-cluster controller pod that holds the lease, once one does. */
  const leadingPod = () =>
    eventually('an in-cluster controller pod to hold the lease', async () => {
      const holder = await leaseHolder();
      const pods = JSON.parse(
        await kubectl.ok('get', 'pods', '-n', 'default', '-l', 'app=echo-controller', '-o', 'json'),
      ) as { items: { metadata: { name: string } }[] };
      return pods.items.map((p) => p.metadata.name).find((name) => holder?.startsWith(`${name}_`));
    });

  /** `kubectl rollout status`; when it fails, the replicas' logs (this run's and the previous) say why. */
  const rolloutStatus = async (): Promise<void> => {
    const r = await kubectl.run('rollout', 'status', 'deployment/echo-controller', '-n', 'default', '--timeout=120s');
    if (r.code === 0) return;
    const logs = await kubectl.run('logs', '-l', 'app=echo-controller', '-n', 'default', '--tail=20');
    const previous = await kubectl.run('logs', '-l', 'app=echo-controller', '-n', 'default', '--previous', '--tail=20');
    throw new Error(
      `rollout status failed: ${r.stderr}\n${logs.stdout}${logs.stderr}\n${previous.stdout}${previous.stderr}`,
    );
  };

  beforeAll(async () => {
    // The stand-in's default image table has the examples' images; a real cluster pulls them (CI's kind workflow).
    cluster = await startTargetCluster('examples-echo', { namespace: 'default' });
    kubectl = new Kubectl(cluster.kubeconfigPath);
  });

  afterAll(async () => {
    await devop?.stop('SIGKILL');
    // A real cluster outlives the suite: remove what the walkthrough applied (the stand-in goes away whole).
    if (externalTarget()) {
      const files = ['echo', 'deployment', 'webhook', 'rbac', 'crd'].map(
        (m) => `examples/echo-controller/manifests/${m}.yaml`,
      );
      const manifests = files.flatMap((f) => ['-f', f]);
      await kubectl?.run('delete', ...manifests, '--ignore-not-found', '--wait=false');
    }
    kubectl?.dispose();
    await cluster?.stop();
  }, STEP_TIMEOUT_MS);

  it(
    'in the cluster: CRD, RBAC and two controller replicas, one of which leads and reconciles an Echo',
    async () => {
      // Given the manifests
      const applied = await kubectl.ok(
        'apply',
        '-f',
        'examples/echo-controller/manifests/crd.yaml',
        '-f',
        'examples/echo-controller/manifests/rbac.yaml',
        '-f',
        'examples/echo-controller/manifests/webhook.yaml',
        '-f',
        'examples/echo-controller/manifests/deployment.yaml',
      );
      for (const obj of [
        'customresourcedefinition.apiextensions.k8s.io/echoes.example.com',
        'clusterrole.rbac.authorization.k8s.io/echo-controller',
        'validatingwebhookconfiguration.admissionregistration.k8s.io/echo-controller',
        'deployment.apps/echo-controller',
      ]) {
        expect(applied).toContain(`${obj} created`);
      }
      await kubectl.ok('wait', '--for=condition=Established', 'crd/echoes.example.com', '--timeout=60s');
      await rolloutStatus();
      const none = await kubectl.run('get', 'echo', '-n', 'default');
      expect(none.code).toBe(0);
      expect(none.stderr).toContain('No resources found in default namespace.');
      const leader = await leadingPod();

      // When an Echo asks for 2 replicas
      expect(await kubectl.ok('apply', '-f', 'examples/echo-controller/manifests/echo.yaml')).toContain(
        'echo.example.com/hello created',
      );

      // Then the leading replica makes its Deployment: 2 Ready pods of the echo image, owned by the Echo
      await deploymentWith(2);
      expect(await kubectl.ok('get', 'deployment', 'hello', '-n', 'default')).toMatch(
        /^NAME\s+READY\s+UP-TO-DATE\s+AVAILABLE\s+AGE\nhello\s+2\/2\s+2\s+2\s/,
      );
      const dep = JSON.parse(await kubectl.ok('get', 'deployment', 'hello', '-n', 'default', '-o', 'json'));
      expect(dep.spec.template.spec.containers[0].image).toBe('devop.test/http-echo');
      expect(dep.metadata.ownerReferences).toMatchObject([
        { apiVersion: 'example.com/v1', kind: 'Echo', name: 'hello', controller: true },
      ]);
      // And the Echo holds the finalizer and reports 2 ready at generation 1
      const echo = await eventually('echo status ready 2', async () => {
        const e = JSON.parse(await kubectl.ok('get', 'echo', 'hello', '-n', 'default', '-o', 'json'));
        return e.status?.readyReplicas === 2 ? e : undefined;
      });
      expect(echo.metadata.finalizers).toEqual(['example.com/echo-deployment']);
      expect(echo.status).toEqual({ replicas: 2, readyReplicas: 2, observedGeneration: 1 });
      expect(await kubectl.ok('get', 'echo', 'hello', '-n', 'default')).toMatch(
        /^NAME\s+REPLICAS\s+READY\s+AGE\nhello\s+2\s+2\s/,
      );
      expect(await kubectl.ok('logs', leader, '-n', 'default')).toContain(
        'default/hello: create deployment (replicas 2)',
      );
    },
    STEP_TIMEOUT_MS,
  );

  it(
    'beside the in-cluster leader under devop --shadow: an Echo change shows writes and stores none of them',
    async () => {
      // Given the in-cluster leader, its Lease and the Deployment it made
      const leader = await leadingPod();
      const holder = await leaseHolder();
      const before = await deploymentWith(2);
      const deploymentsBefore = await kubectl.ok('get', 'deployments', '-n', 'default', '-o', 'name');
      // When a new version of the controller (here: another echo image) runs locally in shadow mode
      const shadow = new LocalProcess(
        process.execPath,
        [
          '--import',
          UTIL_EXTEND_WATCH,
          'bin/devop.js',
          'exec',
          '--shadow',
          '-t',
          'targetless',
          '--output',
          'json',
          '--',
          'npx',
          'tsx',
          'examples/echo-controller/src/main.ts',
          '--leader-elect',
          '--image',
          SHADOW_IMAGE,
        ],
        { ...process.env, ...agentImageEnv(), KUBECONFIG: cluster.kubeconfigPath, CI: 'true' },
      );
      const events = () =>
        shadow.stdout
          .split('\n')
          .filter((line) => line.startsWith('{'))
          .map((line) => JSON.parse(line) as Record<string, any>);
      const output = () =>
        events()
          .filter((e) => e.type === 'output')
          .map((e) => e.text as string)
          .join('');
      try {
        // Then it believes it leads (its Lease is the proxy's, in memory)
        await eventually('the shadowed controller to lead', async () => {
          if (!shadow.running) throw new Error(`devop exited early\n${shadow.output()}`);
          return /lease default\/echo-controller acquired by/.test(output()) ? true : undefined;
        }).catch((err: Error) => {
          throw new Error(`${err.message}\n${shadow.output()}`);
        });
        expect(events()).toContainEqual(expect.objectContaining({ type: 'write', kind: 'Lease', result: 'in memory' }));
        // When the Echo changes
        await kubectl.ok('patch', 'echo', 'hello', '-n', 'default', '--type=merge', '-p', '{"spec":{"replicas":3}}');
        // Then the shadowed controller shows the Deployment update it would make, as a dry run
        const write = await eventually('a write event for the Deployment with 3 replicas', async () =>
          events().find(
            (e) =>
              e.type === 'write' &&
              e.verb === 'update' &&
              e.kind === 'Deployment' &&
              e.name === 'hello' &&
              e.after?.spec?.replicas === 3,
          ),
        ).catch((err: Error) => {
          throw new Error(`${err.message}\n${shadow.output()}`);
        });
        expect(write).toMatchObject({ result: 'dry-run', status: 200, namespace: 'default' });
        expect(write.after.spec.template.spec.containers[0].image).toBe(SHADOW_IMAGE);
        expect(write.before.spec.template.spec.containers[0].image).toBe('devop.test/http-echo');
        // And the in-cluster leader keeps its Lease and reconciles the change itself
        const after = await deploymentWith(3);
        expect(after.uid).toBe(before.uid);
        expect(await leaseHolder()).toBe(holder);
        expect(await kubectl.ok('logs', leader, '-n', 'default')).toContain(
          'default/hello: update deployment (replicas 3)',
        );
        // And nothing of the shadow reached the cluster: no other object, the leader's image
        expect(await kubectl.ok('get', 'deployments', '-n', 'default', '-o', 'name')).toBe(deploymentsBefore);
        expect(
          await kubectl.ok(
            'get',
            'deployment',
            'hello',
            '-n',
            'default',
            '-o',
            'jsonpath={.spec.template.spec.containers[0].image}',
          ),
        ).toBe('devop.test/http-echo');
      } finally {
        await shadow.stop('SIGINT');
      }
      // And the shadow proxy never called Node's util._extend (its deprecation warning, printed from Node 22 on)
      expect(shadow.stderr).not.toContain(UTIL_EXTEND_CALLED);
      // The walkthrough goes on from 2 replicas, reconciled back by the leader
      await kubectl.ok('patch', 'echo', 'hello', '-n', 'default', '--type=merge', '-p', '{"spec":{"replicas":2}}');
      await deploymentWith(2);
      expect(await leaseHolder()).toBe(holder);
    },
    STEP_TIMEOUT_MS,
  );

  it(
    'run locally under devop --replace: the cluster replicas go to 0 and the local controller takes the lease',
    async () => {
      devop = new LocalProcess(
        process.execPath,
        [
          'bin/devop.js',
          'exec',
          '-t',
          'deploy/echo-controller',
          '--replace',
          '--',
          'npx',
          'tsx',
          'examples/echo-controller/src/main.ts',
          '--leader-elect',
        ],
        { ...process.env, ...agentImageEnv(), KUBECONFIG: cluster.kubeconfigPath, CI: 'true' },
      );
      const identity = await eventually('the local controller to acquire the lease', async () => {
        if (!devop!.running) throw new Error(`devop exited early\n${devop!.output()}`);
        return /lease default\/echo-controller acquired by (\S+)/.exec(devop!.stdout)?.[1];
      }).catch((err: Error) => {
        throw new Error(`${err.message}\n${devop!.output()}`);
      });
      expect(devop.stderr).toContain('devop: ready');
      expect(devop.stderr).toMatch(/replace deployment\/echo-controller: scaled to 0 \(was 2\)/);
      expect(
        await kubectl.ok('get', 'deployment', 'echo-controller', '-n', 'default', '-o', 'jsonpath={.spec.replicas}'),
      ).toBe('0');
      await kubectl.ok('wait', '--for=delete', 'pod', '-l', 'app=echo-controller', '-n', 'default', '--timeout=120s');
      expect(await leaseHolder()).toBe(identity);
      // A second --replace of the same workload is refused, naming the session that holds it
      const second = new LocalProcess(
        process.execPath,
        ['bin/devop.js', 'exec', '-t', 'deploy/echo-controller', '--replace', '--', 'true'],
        { ...process.env, ...agentImageEnv(), KUBECONFIG: cluster.kubeconfigPath, CI: 'true' },
      );
      const refused = await second.exit;
      expect(refused.code, second.output()).toBe(1);
      expect(second.stderr).toMatch(/devop: deployment\/echo-controller is already replaced by \S+@\S+ since /);
    },
    STEP_TIMEOUT_MS,
  );

  it(
    'changing replicas to 3 updates the Deployment in place',
    async () => {
      const before = await deployment();
      await kubectl.ok('patch', 'echo', 'hello', '-n', 'default', '--type=merge', '-p', '{"spec":{"replicas":3}}');
      const after = await deploymentWith(3);
      expect(after.uid).toBe(before?.uid);
      // The shadow step changed the Echo's spec twice before: its generation is 4 now.
      const generation = Number(
        await kubectl.ok('get', 'echo', 'hello', '-n', 'default', '-o', 'jsonpath={.metadata.generation}'),
      );
      expect(generation).toBe(4);
      await eventually(`echo status to observe generation ${generation} with 3 ready`, async () => {
        const s = JSON.parse(await kubectl.ok('get', 'echo', 'hello', '-n', 'default', '-o', 'jsonpath={.status}'));
        return s.observedGeneration === generation && s.readyReplicas === 3 ? s : undefined;
      });
      expect(devop!.stdout).toContain('default/hello: update deployment (replicas 3)');
    },
    STEP_TIMEOUT_MS,
  );

  it(
    'a deleted Deployment is created again',
    async () => {
      const before = await deployment();
      expect(await kubectl.ok('delete', 'deployment', 'hello', '-n', 'default')).toContain(
        'deployment.apps "hello" deleted',
      );
      const again = await deploymentWith(3, before?.uid);
      expect(again.uid).not.toBe(before?.uid);
      expect(devop!.stdout).toContain('default/hello: create deployment (replicas 3)');
    },
    STEP_TIMEOUT_MS,
  );

  it(
    'deleting the Echo removes its Deployment first, then the Echo',
    async () => {
      // Given a watch on Echoes that checks, when the Echo is finally gone, whether its Deployment still exists
      const kc = new KubeConfig();
      kc.loadFromFile(cluster.kubeconfigPath);
      let deploymentWhenEchoGone: boolean | undefined;
      const echoGone = new Promise<void>((resolve, reject) => {
        void new Watch(kc)
          .watch(
            '/apis/example.com/v1/namespaces/default/echoes',
            {},
            (type, obj: { metadata?: { name?: string } }) => {
              if (type !== 'DELETED' || obj.metadata?.name !== 'hello') return;
              void deployment().then((d) => {
                deploymentWhenEchoGone = d !== undefined;
                resolve();
              }, reject);
            },
            (err: unknown) => err && reject(err),
          )
          .then((abort) => echoGone.finally(() => abort.abort()));
      });
      // When the Echo is deleted (kubectl waits until it is gone, i.e. until the finalizer is removed)
      expect(await kubectl.ok('delete', 'echo', 'hello', '-n', 'default', '--timeout=120s')).toContain(
        'echo.example.com "hello" deleted',
      );
      await echoGone;
      // Then the Deployment was already gone when the Echo went, and neither exists now
      expect(deploymentWhenEchoGone).toBe(false);
      expect(await deployment()).toBeUndefined();
      expect((await kubectl.run('get', 'echo', 'hello', '-n', 'default')).stderr).toContain('NotFound');
      const log = devop!.stdout;
      expect(log.indexOf('default/hello: echo deleted, delete deployment')).toBeGreaterThan(-1);
      expect(log.indexOf('default/hello: deployment gone, remove finalizer')).toBeGreaterThan(
        log.indexOf('default/hello: echo deleted, delete deployment'),
      );
    },
    STEP_TIMEOUT_MS,
  );

  it(
    'back to the cluster: devop stops, the replicas come back, and one of them leads and reconciles',
    async () => {
      // When devop stops (Ctrl-C): the local controller hands the lease back and devop restores the replicas
      const exit = await devop!.stop('SIGINT');
      expect(devop!.stderr, `devop ended with ${JSON.stringify(exit)}`).toMatch(
        /restore deployment\/echo-controller: 2 replicas/,
      );
      await kubectl.ok('rollout', 'status', 'deployment/echo-controller', '-n', 'default', '--timeout=120s');

      // Then a cluster replica leads and reconciles
      const leader = await leadingPod();
      await kubectl.ok('apply', '-f', 'examples/echo-controller/manifests/echo.yaml');
      await deploymentWith(2);
      expect(await kubectl.ok('logs', leader, '-n', 'default')).toContain(
        'default/hello: create deployment (replicas 2)',
      );
    },
    STEP_TIMEOUT_MS,
  );

  it(
    'after kill -9 of devop --replace, the guard brings the replicas back within the Lease expiry + 10 s',
    async () => {
      devop = new LocalProcess(
        process.execPath,
        ['bin/devop.js', 'exec', '-t', 'deploy/echo-controller', '--replace', '--', 'sleep', '600'],
        { ...process.env, ...agentImageEnv(), KUBECONFIG: cluster.kubeconfigPath, CI: 'true' },
      );
      await eventually('devop --replace to be ready', async () => {
        if (!devop!.running) throw new Error(`devop exited early\n${devop!.output()}`);
        return devop!.stderr.includes('devop: ready') ? true : undefined;
      });
      const copy = /copy pod (\S+)/.exec(devop.stderr)?.[1];
      expect(copy).toBeDefined();
      await devop.stop('SIGKILL');
      const killedAt = Date.now();
      await eventually(
        'the replicas back at 2',
        async () => {
          const r = await kubectl.ok(
            'get',
            'deployment',
            'echo-controller',
            '-n',
            'default',
            '-o',
            'jsonpath={.spec.replicas}',
          );
          return r === '2' ? true : undefined;
        },
        (LEASE_DURATION_SECONDS + 10) * 1000,
      );
      expect(Date.now() - killedAt).toBeLessThanOrEqual((LEASE_DURATION_SECONDS + 10) * 1000);
      await eventually('the copy pod gone', async () =>
        (await kubectl.run('get', 'pod', copy!, '-n', 'default')).code !== 0 ? true : undefined,
      );
      await kubectl.ok('rollout', 'status', 'deployment/echo-controller', '-n', 'default', '--timeout=120s');
    },
    STEP_TIMEOUT_MS,
  );

  it(
    'the webhook under devop: the local process refuses, and while it is stopped the pods answer in time',
    async () => {
      // Given the webhook run locally with a lower limit, stealing the webhook's traffic from both cluster replicas
      const localPort = await freePort();
      devop = new LocalProcess(
        process.execPath,
        [
          'bin/devop.js',
          'exec',
          '-t',
          'validatingwebhookconfiguration/echo-controller',
          '--steal',
          '-p',
          `8443:${localPort}`,
          '--',
          'npx',
          'tsx',
          'examples/echo-controller/src/main.ts',
          '--leader-elect',
          '--webhook-port',
          String(localPort),
          '--max-replicas',
          '3',
        ],
        { ...process.env, ...agentImageEnv(), KUBECONFIG: cluster.kubeconfigPath, CI: 'true' },
      );
      await eventually('devop ready on both webhook pods', async () => {
        if (!devop!.running) throw new Error(`devop exited early\n${devop!.output()}`);
        return devop!.stderr.includes('devop: ready') && /all pods: joined pod/.test(devop!.stderr) ? true : undefined;
      }).catch((err: Error) => {
        throw new Error(`${err.message}\n${devop!.output()}`);
      });
      expect(devop.stderr).toContain('webhook replicas.echoes.example.com (timeout 5 s)');

      // When an Echo above the limit is applied, the local process refuses it (its limit is 3, the pods' 5)
      const refused = await kubectl.run('apply', '-f', 'examples/echo-controller/manifests/echo-six.yaml');
      expect(refused.code, `${refused.stdout}\n${devop.output()}`).not.toBe(0);
      expect(refused.stderr).toContain(
        'admission webhook "replicas.echoes.example.com" denied the request: spec.replicas: 6 is above the limit of 3',
      );
      expect(devop.stdout).toContain('webhook: CREATE default/six: denied (spec.replicas: 6 is above the limit of 3)');

      // When the local process is stopped, as at a breakpoint (a moment after its answer: the connection it answered is
      // closed once idle, so that the next request comes on a new one, which can go to the pod)
      await new Promise((resolve) => setTimeout(resolve, 2 * ANSWERED_IDLE_CLOSE_MS));
      // (the pid the local process logs: stopping its wrappers, or devop, is not what a debugger does)
      const pid = Number(/webhook listening on \S+ \(pid (\d+)\)/.exec(devop.stdout)?.[1]);
      process.kill(pid, 'SIGSTOP');
      try {
        const started = Date.now();
        const again = await kubectl.run('apply', '-f', 'examples/echo-controller/manifests/echo-six.yaml');
        const took = Date.now() - started;
        // Then a pod answers (its limit is 5) within the webhook's 5 s, and devop says the pod answered and why
        expect(again.stderr).toContain(
          'admission webhook "replicas.echoes.example.com" denied the request: ' +
            'spec.replicas: 6 is above the limit of 5',
        );
        expect(took).toBeLessThan(5000 + 2000);
        expect(devop.stderr).toMatch(/connection \S+ → pod \S+ :8443: the local command did not answer in 3\.0 s/);
      } finally {
        process.kill(pid, 'SIGCONT');
      }
      // And once resumed, the local process answers again (a moment later: the connection the pod answered is closed
      // once idle, as the one the local process answered was)
      await new Promise((resolve) => setTimeout(resolve, 2 * ANSWERED_IDLE_CLOSE_MS));
      const resumed = await kubectl.run('apply', '-f', 'examples/echo-controller/manifests/echo-six.yaml');
      expect(resumed.stderr).toContain('spec.replicas: 6 is above the limit of 3');
      await devop.stop('SIGINT');
    },
    STEP_TIMEOUT_MS,
  );
});
