// The farm-operator walkthrough's `-t apiservice/…` on a stand-in whose API server runs on the pod's node (as on kind or
// minikube): its aggregator connects from the node's address, and devop takes those connections without
// --steal-probes because it sees where the API server is.
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { startCluster, type ClusterHandle } from '../cluster/index.js';
import { requireRoot } from '../helpers/root.js';
import { standinOnly } from '../helpers/target-cluster.js';
import { Kubectl, LocalProcess, eventually, freePort } from './harness.js';

requireRoot('examples: farm-operator, API server on the node');

const STEP_TIMEOUT_MS = 300_000;
const it = standinOnly('the API server on the node is a stand-in option');

describe('farm-operator through apiservice/, API server on the node', () => {
  let cluster: ClusterHandle;
  let kubectl: Kubectl;
  let devop: LocalProcess | undefined;
  let localPort: number;

  beforeAll(async () => {
    cluster = await startCluster({ apiServerOnNode: true });
    kubectl = new Kubectl(cluster.kubeconfigPath);
    localPort = await freePort();
  });

  afterAll(async () => {
    await devop?.stop('SIGKILL');
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
      const endpoint = await kubectl.ok('get', 'endpoints', 'kubernetes', '-o', 'jsonpath={.subsets[0].addresses[0].ip}');
      expect(endpoint).toBe(podNode);

      // When step 3 runs locally under devop with the APIService as target (no --steal-probes)
      devop = new LocalProcess(
        process.execPath,
        [
          'bin/devop.js',
          'exec',
          '-t',
          'apiservice/v1alpha.farm.example.com',
          '--steal',
          '-p',
          `8443:${localPort}`,
          '--',
          'npx',
          'tsx',
          'examples/farm-operator/src/main.ts',
          '--step',
          '3',
          '--port',
          String(localPort),
        ],
        { ...process.env, KUBECONFIG: cluster.kubeconfigPath, CI: 'true' },
      );
      await eventually('devop to be ready', async () => {
        if (!devop!.running) throw new Error(`devop exited early\n${devop!.output()}`);
        return devop!.stderr.includes('devop: ready') ? true : undefined;
      }).catch((err: Error) => {
        throw new Error(`${err.message}\n${devop!.output()}`);
      });

      // Then the ready line names the APIService, its Service, its pod, the node's connections and Available
      expect(devop.stderr).toMatch(
        /devop: apiservice v1alpha\.farm\.example\.com → service default\/farm-operator, 1 pod, the node's connections taken .*, Available=True/,
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
      expect(devop.stdout).toMatch(/step=3 GET \/apis\/farm\.example\.com\/v1alpha\/namespaces\/default\/llamas/);
      expect(devop.stdout).toMatch(/step=3 GET \/apis\/farm\.example\.com\/v1alpha\/namespaces\/default\/farmpods/);
    },
    STEP_TIMEOUT_MS,
  );
});
