// A stand-in of its own for a suite that drives the node's pods: started before the file's tests, stopped after them,
// with a client of the core API and the node's runtime (exec, logs, dialling a pod).
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll } from 'vitest';
import { startCluster, type ClusterHandle, type NodeRuntime } from '../standin/index.js';

export interface StandinNode {
  cluster: ClusterHandle;
  core: CoreV1Api;
  runtime: NodeRuntime;
}

/** Starts the stand-in before the file's tests (`use` receives it once it runs) and stops it after them. */
export function withStandinNode(use: (node: StandinNode) => void): void {
  let cluster: ClusterHandle | undefined;
  beforeAll(async () => {
    cluster = await startCluster();
    const kc = new KubeConfig();
    kc.loadFromFile(cluster.kubeconfigPath);
    use({ cluster, core: kc.makeApiClient(CoreV1Api), runtime: cluster.runtime! });
  });
  afterAll(async () => {
    await cluster?.stop();
  });
}
