// The farm-operator walkthrough (docs/walkthrough.md) end to end on the stand-in (or a real cluster:
// testkit/target-cluster.ts): kubectl 1.33 reaches the aggregated API, first served by the in-cluster step-1 pod,
// then — under `devop exec -t apiservice/… --steal --record` — by step 3 running locally, then step 1 again; the
// recorded requests are replayed against step 2 running locally.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { externalTarget, startTargetCluster, type TargetCluster } from '../../testkit/target-cluster.js';
import { Kubectl, LocalProcess, devopFarmStep3, eventually } from './harness.js';
import { freePort } from '../../testkit/sockets.js';

requireRoot('examples: farm-operator');

/**
 * Each step waits on rollouts and discovery with generous deadlines (shared CI machine); this bounds the whole step.
 */
const STEP_TIMEOUT_MS = 300_000;

/** What kubectl says when the group version has no such resource and its discovery knows it… */
const UNKNOWN_TYPE = (type: string) => `error: the server doesn't have a resource type "${type}"`;
/** …and when its discovery cache still lists the type from step 3: the step-1 server's 404. */
const NOT_FOUND_FROM_STEP_1 =
  'Error from server (NotFound): Unable to list "farm.example.com/v1alpha, Resource=llamas": the server could not ' +
  'find the requested resource';

describe('farm-operator walkthrough', () => {
  let cluster: TargetCluster;
  let kubectl: Kubectl;
  let devop: LocalProcess | undefined;
  let localPort: number;
  let step2: LocalProcess | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'devop-farm-walkthrough-'));
  const harFile = join(dir, 'farm.har');

  beforeAll(async () => {
    // The default image table knows the examples' images, as `npm run cluster` does.
    cluster = await startTargetCluster('examples-farm', { namespace: 'default' });
    kubectl = new Kubectl(cluster.kubeconfigPath);
    localPort = await freePort();
  });

  afterAll(async () => {
    await devop?.stop('SIGKILL');
    await step2?.stop('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    // A real cluster outlives the suite: remove what the walkthrough applied (the stand-in goes away whole).
    if (externalTarget()) {
      await kubectl?.run('delete', '-f', 'examples/farm-operator/app.yaml', '--ignore-not-found', '--wait=false');
    }
    kubectl?.dispose();
    await cluster?.stop();
  });

  it(
    'step 1 in the cluster: the APIService is available and serves no resource yet',
    async () => {
      // Given the example's manifests
      // When they are applied
      const applied = await kubectl.ok('apply', '-f', 'examples/farm-operator/app.yaml');
      // Then every object is created
      for (const obj of [
        'serviceaccount/farm-operator',
        'clusterrole.rbac.authorization.k8s.io/farm-operator',
        'deployment.apps/farm-operator',
        'service/farm-operator',
        'apiservice.apiregistration.k8s.io/v1alpha.farm.example.com',
      ]) {
        expect(applied).toContain(`${obj} created`);
      }
      await kubectl.ok('rollout', 'status', 'deployment/farm-operator', '--timeout=120s');

      // And the aggregator reaches the step-1 server through the Service
      const apiservice = await eventually('the APIService to be Available', async () => {
        const out = await kubectl.ok('get', 'apiservice', 'v1alpha.farm.example.com');
        return /default\/farm-operator\s+True/.test(out) ? out : undefined;
      });
      expect(apiservice).toMatch(/^NAME\s+SERVICE\s+AVAILABLE\s+AGE/);

      // And the group version is known but empty: kubectl has no llamas or farmpods to show
      const raw = JSON.parse(await kubectl.ok('get', '--raw', '/apis/farm.example.com/v1alpha'));
      expect(raw).toMatchObject({ kind: 'APIResourceList', groupVersion: 'farm.example.com/v1alpha', resources: [] });
      for (const [type, args] of [
        ['llamas', ['get', 'llamas', '-n', 'default']],
        ['llama', ['get', 'llama', 'dolly', '-n', 'default', '-o', 'json']],
        ['farmpods', ['get', 'farmpods', '-n', 'default']],
      ] as const) {
        const r = await kubectl.run(...args);
        expect(r.code, `kubectl ${args.join(' ')}: ${r.stdout}`).not.toBe(0);
        expect(r.stderr.trim()).toBe(UNKNOWN_TYPE(type));
      }
    },
    STEP_TIMEOUT_MS,
  );

  it(
    'under devop exec -t apiservice/… --steal, step 3 running locally answers kubectl',
    async () => {
      // Given the step-1 pod serving the APIService, and an API server that is not on the pod's node (its own
      // control-plane address), as on a cluster whose kube-apiserver runs on a control-plane node
      const endpoints = JSON.parse(await kubectl.ok('get', 'endpoints', 'kubernetes', '-n', 'default', '-o', 'json'));
      const hostIP = 'jsonpath={.items[0].status.hostIP}';
      const podNode = await kubectl.ok('get', 'pods', '-n', 'default', '-l', 'app=farm-operator', '-o', hostIP);
      expect(endpoints.subsets[0].addresses).toHaveLength(1);
      expect(podNode).not.toBe('');
      expect(endpoints.subsets[0].addresses[0].ip).not.toBe(podNode);
      // When step 3 runs locally under devop with the APIService as target, recording (plain --steal: the aggregator's
      // connections come from the control plane's address, kubelet's probes from the node's)
      devop = devopFarmStep3(cluster.kubeconfigPath, localPort, harFile);
      await eventually('devop to be ready', async () => {
        if (!devop!.running) throw new Error(`devop exited early\n${devop!.output()}`);
        return devop!.stderr.includes('devop: ready') ? true : undefined;
      }).catch((err: Error) => {
        throw new Error(`${err.message}\n${devop!.output()}`);
      });

      // Then devop saw that the API server is not on the pod's node, and shows the APIService's condition
      expect(devop.stderr).toContain("not the node's address: kubelet probes stay with the pod");
      expect(devop.stderr).toMatch(
        new RegExp(
          'devop: apiservice v1alpha\\.farm\\.example\\.com → service default/farm-operator, 1 pod, ' +
            'Available=True \\(Passed\\)\ndevop: ready\n',
        ),
      );

      // And kubectl's llamas come from the local process (the aggregator may need a moment to see the new discovery)
      const llamas = await eventually('llamas to be listed', async () => {
        const r = await kubectl.run('get', 'llamas', '-n', 'default');
        return r.code === 0 ? r.stdout : undefined;
      });
      expect(llamas).toMatch(/^NAME\s+WEIGHT\s+HEIGHT\s+AGE\n/);
      expect(llamas).toMatch(/\ndolly\s+130\s+175\s/);
      expect(llamas).toMatch(/\nfernando\s+160\s+185\s/);

      const dolly = JSON.parse(await kubectl.ok('get', 'llama', 'dolly', '-n', 'default', '-o', 'json'));
      expect(dolly).toMatchObject({
        apiVersion: 'farm.example.com/v1alpha',
        kind: 'Llama',
        metadata: { name: 'dolly', namespace: 'default' },
        spec: { weight: 130, height: 175 },
      });

      const missing = await kubectl.run('get', 'llama', 'nobody', '-n', 'default');
      expect(missing.code).not.toBe(0);
      expect(missing.stderr).toContain('Error from server (NotFound): llamas.farm.example.com "nobody" not found');

      // And FarmPods are built from the namespace's real pods: devop's agent pod is one of them while devop runs
      const pods = JSON.parse(
        await kubectl.ok('get', 'pods', '-n', 'default', '-l', 'app=farm-operator', '-o', 'json'),
      ) as { items: { metadata: { name: string } }[] };
      expect(await kubectl.ok('get', 'pods', '-n', 'default', '-o', 'name')).toMatch(/^pod\/devop-agent-/m);
      // And the walkthrough's -l app=farm-operator (kubectl's labelSelector, handed on to the pod list) lists the
      // farm's pods only
      const farmpods = await kubectl.ok('get', 'farmpods', '-n', 'default', '-l', 'app=farm-operator');
      expect(farmpods).toMatch(/^NAME\s+CONTAINERS\s+AGE\n/);
      for (const p of pods.items) expect(farmpods).toMatch(new RegExp(`\\nfarm-${p.metadata.name}\\s+1\\s`));
      expect(farmpods.trim().split('\n')).toHaveLength(pods.items.length + 1);

      // And the requests reached the local process (its request log is devop's stdout)
      expect(devop.stdout).toMatch(/step=3 GET \/apis\/farm\.example\.com\/v1alpha\/namespaces\/default\/llamas/);
      expect(devop.stdout).toMatch(/step=3 GET \/apis\/farm\.example\.com\/v1alpha\/namespaces\/default\/farmpods/);

      // And kubelet's readiness probes were left to the pod: they keep arriving there, never at the local process
      const probesSeen = async () =>
        (await kubectl.ok('logs', 'deployment/farm-operator', '-n', 'default')).match(/^step=1 GET \/healthz 200 /gm)
          ?.length ?? 0;
      const before = await probesSeen();
      await eventually('another probe in the pod’s log', async () =>
        (await probesSeen()) > before ? true : undefined,
      );
      expect(devop.stdout).not.toMatch(/GET \/healthz/);
      expect(
        await kubectl.ok(
          'get',
          'deployment',
          'farm-operator',
          '-n',
          'default',
          '-o',
          'jsonpath={.status.readyReplicas}',
        ),
      ).toBe('1');
    },
    STEP_TIMEOUT_MS,
  );

  it(
    'after devop stops, the cluster’s step-1 pod answers again',
    async () => {
      // When devop is stopped (Ctrl-C)
      const exit = await devop!.stop('SIGINT');
      expect(exit.signal === null || exit.signal === 'SIGINT', devop!.output()).toBe(true);

      // Then llamas are no longer served: the step-1 server answers
      const r = await eventually('llamas to be gone again', async () => {
        const res = await kubectl.run('get', 'llamas', '-n', 'default');
        return res.code !== 0 ? res : undefined;
      });
      expect(r.stdout).toBe('');
      expect(r.stderr).toContain(NOT_FOUND_FROM_STEP_1);
      const raw = JSON.parse(await kubectl.ok('get', '--raw', '/apis/farm.example.com/v1alpha'));
      expect(raw.resources).toEqual([]);
      expect(await kubectl.ok('get', 'apiservice', 'v1alpha.farm.example.com')).toMatch(
        /default\/farm-operator\s+True/,
      );
      // And it was the pod itself: its request log has the 404 for llamas, which it never saw before devop stopped
      expect(await kubectl.ok('logs', 'deployment/farm-operator', '-n', 'default')).toMatch(
        /step=1 GET \/apis\/farm\.example\.com\/v1alpha\/namespaces\/default\/llamas\S* 404 /,
      );
    },
    STEP_TIMEOUT_MS,
  );

  it(
    'replay: the recorded Llama and FarmPod requests against step 2 running locally name the one that changed',
    async () => {
      // Given the session's recording (devop wrote it when it stopped)
      expect(devop!.stderr).toMatch(/devop: recorded \d+ HTTP exchanges to .*farm\.har \(devop replay .*farm\.har\)/);
      // When step 2 (no farmpods) runs locally on the recorded port and the requests are replayed to it
      step2 = new LocalProcess(
        'npx',
        ['tsx', 'examples/farm-operator/src/main.ts', '--step', '2', '--port', String(localPort)],
        process.env,
      );
      await eventually('step 2 to listen', async () => (step2!.stdout.includes('listening') ? true : undefined));
      const replay = new LocalProcess(
        process.execPath,
        ['bin/devop.js', 'replay', harFile, '--filter', '/namespaces/default/(llamas/|farmpods)'],
        process.env,
      );
      const exit = await replay.exit;
      // Then dolly and nobody answer as recorded, and farmpods — a 404 now — is the one request that changed
      expect(exit.code, replay.output()).toBe(1);
      const lines = replay.stdout.trim().split('\n');
      const verdicts = lines.filter((l) => /^[✓✗!-] /.test(l));
      expect(verdicts).toHaveLength(3);
      expect(verdicts).toContainEqual(expect.stringMatching(/^✓ GET \S+\/namespaces\/default\/llamas\/dolly 200 /));
      expect(verdicts).toContainEqual(expect.stringMatching(/^✓ GET \S+\/namespaces\/default\/llamas\/nobody 404 /));
      expect(verdicts).toContainEqual(expect.stringMatching(/^✗ GET \S+\/namespaces\/default\/farmpods\S* 200 → 404 /));
      expect(lines).toContain('    status 200 → 404');
      expect(lines.at(-1)).toMatch(/^3 requests replayed from .*farm\.har: 2 same, 1 different$/);
      await step2.stop('SIGINT');
      step2 = undefined;
    },
    STEP_TIMEOUT_MS,
  );

  it(
    'shipping step 3: the cluster’s pod serves llamas and farmpods itself, with its service account',
    async () => {
      // When the Deployment's image moves to step 3
      await kubectl.ok(
        'set',
        'image',
        'deployment/farm-operator',
        'farm-operator=devop.test/farm-operator:step3',
        '-n',
        'default',
      );
      await kubectl.ok('rollout', 'status', 'deployment/farm-operator', '-n', 'default', '--timeout=120s');
      // Then kubectl's farmpods name the new pod, listed by the pod itself through the in-cluster API
      const pods = JSON.parse(
        await kubectl.ok(
          'get',
          'pods',
          '-n',
          'default',
          '-l',
          'app=farm-operator',
          '--field-selector=status.phase=Running',
          '-o',
          'json',
        ),
      ) as {
        items: { metadata: { name: string; deletionTimestamp?: string } }[];
      };
      const current = pods.items.filter((p) => !p.metadata.deletionTimestamp).map((p) => p.metadata.name);
      expect(current).toHaveLength(1);
      const farmpods = await eventually('farmpods from the step-3 pod', async () => {
        const r = await kubectl.run('get', 'farmpods', '-n', 'default', '-l', 'app=farm-operator');
        return r.code === 0 && current.every((name) => new RegExp(`\\nfarm-${name}\\s+1\\s`).test(r.stdout))
          ? r.stdout
          : undefined;
      });
      expect(farmpods).toMatch(/^NAME\s+CONTAINERS\s+AGE\n/);
      expect(await kubectl.ok('get', 'llamas', '-n', 'default')).toMatch(/\ndolly\s+130\s+175\s/);
      // And the logs the walkthrough reads are the newest ReplicaSet's pod's: `kubectl logs deployment/…` picks the pod
      // ready longest (kubectl pkg/util/podutils/podutils.go, ByLogging), the step-1 pod while it terminates
      const newest = (
        await kubectl.ok(
          'get',
          'rs',
          '-n',
          'default',
          '-l',
          'app=farm-operator',
          '--sort-by=.metadata.creationTimestamp',
          '-o',
          'name',
        )
      )
        .trim()
        .split('\n')
        .at(-1);
      const logs = await kubectl.ok('logs', '-n', 'default', newest ?? '');
      expect(logs).toContain('farm-operator step 3 listening on https://0.0.0.0:8443');
      expect(logs).toMatch(/step=3 GET \/apis\/farm\.example\.com\/v1alpha\/namespaces\/default\/farmpods\S* 200 /);
    },
    STEP_TIMEOUT_MS,
  );
});
