// The farm-operator walkthrough's `-t apiservice/…` on a stand-in whose API server runs on the pod's node (as on kind
// or minikube): its aggregator connects from the node's address, and devop takes those connections without
// --steal-probes because it sees where the API server is. The session is recorded (--record); the walkthrough's suite
// (farm-operator.test.ts) replays its recording.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import type { Har } from '../../cli/record/har.js';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { requireRoot } from '../../testkit/root.js';
import { externalTarget, standinOnly } from '../../testkit/target-cluster.js';
import { Kubectl, type LocalProcess, devopFarmStep3, eventually } from './harness.js';
import { freePort } from '../../testkit/sockets.js';

requireRoot('examples: farm-operator, API server on the node');

const STEP_TIMEOUT_MS = 300_000;
const it = standinOnly('the API server on the node is a stand-in option');

describe('farm-operator through apiservice/, API server on the node', () => {
  let cluster: ClusterHandle;
  let kubectl: Kubectl;
  let devop: LocalProcess | undefined;
  let localPort: number;
  const dir = mkdtempSync(join(tmpdir(), 'devop-farm-record-'));
  const harFile = join(dir, 'farm.har');

  beforeAll(async () => {
    if (externalTarget()) return; // every test here is skipped on a real cluster
    cluster = await startCluster({ apiServerOnNode: true });
    kubectl = new Kubectl(cluster.kubeconfigPath);
    localPort = await freePort();
  });

  afterAll(async () => {
    await devop?.stop('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    kubectl?.dispose();
    await cluster?.stop();
  });

  it(
    'plain --steal takes the aggregator’s connections from the node’s address: kubectl is answered locally',
    async () => {
      // Given step 1 serving the APIService, and an API server that advertises the pod's node address
      await kubectl.ok('apply', '-f', 'examples/farm-operator/app.yaml');
      await kubectl.ok('rollout', 'status', 'deployment/farm-operator', '--timeout=120s');
      await eventually('the APIService to be Available', async () => {
        const out = await kubectl.ok('get', 'apiservice', 'v1alpha.farm.example.com');
        return /default\/farm-operator\s+True/.test(out) ? out : undefined;
      });
      const hostIP = 'jsonpath={.items[0].status.hostIP}';
      const podNode = await kubectl.ok('get', 'pods', '-l', 'app=farm-operator', '-o', hostIP);
      const endpoint = await kubectl.ok(
        'get',
        'endpoints',
        'kubernetes',
        '-o',
        'jsonpath={.subsets[0].addresses[0].ip}',
      );
      expect(endpoint).toBe(podNode);

      // When step 3 runs locally under devop with the APIService as target (no --steal-probes)
      devop = devopFarmStep3(cluster.kubeconfigPath, localPort, harFile);
      await eventually('devop to be ready', async () => {
        if (!devop!.running) throw new Error(`devop exited early\n${devop!.output()}`);
        return devop!.stderr.includes('devop: ready') ? true : undefined;
      }).catch((err: Error) => {
        throw new Error(`${err.message}\n${devop!.output()}`);
      });

      // Then the ready line names the APIService, its Service, its pod, the node's connections and Available
      expect(devop.stderr).toMatch(
        new RegExp(
          'devop: apiservice v1alpha\\.farm\\.example\\.com → service default/farm-operator, 1 pod, ' +
            "the node's connections taken .*, Available=True",
        ),
      );
      expect(devop.stderr).toContain("the API server connects from the node's address");

      // And kubectl's llamas and farmpods come from the local process
      const llamas = await eventually('llamas to be listed', async () => {
        const r = await kubectl.run('get', 'llamas', '-n', 'default');
        return r.code === 0 ? r.stdout : undefined;
      });
      expect(llamas).toMatch(/\ndolly\s+130\s+175\s/);
      const farmpods = await kubectl.ok('get', 'farmpods', '-n', 'default');
      expect(farmpods).toMatch(/^NAME\s+CONTAINERS\s+AGE\n/);
      expect(farmpods).toMatch(/\nfarm-farm-operator-\S+\s+1\s/);
      // (the local server logs a request once it has answered it: its line may follow kubectl's output)
      for (const resource of ['llamas', 'farmpods'])
        await eventually(`the local server's log line for ${resource}`, async () =>
          new RegExp(`step=3 GET /apis/farm\\.example\\.com/v1alpha/namespaces/default/${resource}`).test(devop!.stdout)
            ? true
            : undefined,
        );
    },
    STEP_TIMEOUT_MS,
  );

  it(
    '--record wrote each exchange as HAR 1.2: the aggregator’s requests over TLS, the local answers, the pod',
    async () => {
      // Given one more request answered locally while recording, then devop stopped (Ctrl-C)
      await kubectl.ok('get', 'llama', 'dolly', '-n', 'default', '-o', 'json');
      await devop!.stop('SIGINT');
      expect(devop!.stderr).toMatch(/recorded \d+ HTTP exchanges? to .*farm\.har/);

      // Then the HAR holds the aggregator's requests over TLS, with the local answers and the pod
      const har = JSON.parse(readFileSync(harFile, 'utf8')) as Har;
      expect(har.log.version).toBe('1.2');
      const pod = await kubectl.ok(
        'get',
        'pods',
        '-l',
        'app=farm-operator',
        '-o',
        'jsonpath={.items[0].metadata.name}',
      );
      const farmpods = har.log.entries.find((e) => e.request.url.includes('/namespaces/default/farmpods'));
      expect(farmpods?.request.url).toMatch(/^https:\/\//);
      expect(farmpods).toMatchObject({ _pod: pod, _port: 8443, _localPort: localPort, response: { status: 200 } });
      expect(farmpods?.response.content.text).toContain(`farm-${pod}`);
      const dolly = har.log.entries.find((e) => e.request.url.endsWith('/namespaces/default/llamas/dolly'));
      expect(JSON.parse(dolly?.response.content.text ?? '{}')).toMatchObject({ kind: 'Llama', spec: { weight: 130 } });
    },
    STEP_TIMEOUT_MS,
  );
});
