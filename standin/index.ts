// startCluster: the Kubernetes stand-in for tests — certificates, the API server and controllers, the node (kubelet),
// kubeconfig files — and a handle that stops all of it.
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeCerts, makeFrontProxyCerts, servingNames } from './certs.js';
import { writeKubeconfig } from './kubeconfig.js';
import { startControlPlane, type ControlPlane } from './apiserver/index.js';
import { ADMIN_USER, RESTRICTED_USER } from './apiserver/auth.js';
import type { NodeRuntime } from './node-runtime.js';
import { reserveSubnets, startKubelet, type NodeSubnets } from './kubelet/index.js';
import { run, runQuiet } from './kubelet/host.js';
import { linkTag } from './kubelet/network.js';

// What tools outside the tests (bench/, scripts/) may use of the stand-in besides startCluster: its pods/portforward
// and exec WebSocket server, to put the API server's hop into a benchmark's path.
export { createStreamServer } from './apiserver/streams.js';
export type { ExecProcess, NodeRuntime } from './node-runtime.js';
// What the test kit uses of the node and the certificates: images by reference, containerd's CLI, a CA and certs.
export { normalizeImageRef } from './images.js';
export { ctr, ctrQuiet } from './kubelet/containerd.js';
export { makeCerts, type ClusterCerts } from './certs.js';

export const NODE_NAME = 'standin-node';

export interface ClusterOptions {
  /** Run the kubelet (pods become processes in network namespaces; needs root). Default true. */
  kubelet?: boolean;
  /** Directory of the image archives (*.oci.tar): default $DEVOP_IMAGES_DIR, else <repo>/dist/images. */
  imagesDir?: string;
  /** Unique id of this cluster on the machine (names of netns, links, cgroups, chains). Default: random. */
  instance?: string;
  /**
   * The API server runs on the node, as on kind, minikube or any single-node cluster: it advertises the node's IP in
   * the `kubernetes` Endpoints, so its aggregator connects to pods from the node's address (the one kubelet probes come
   * from). Default false: it has a control-plane address of its own, as when it runs on another node.
   */
  apiServerOnNode?: boolean;
}

export interface ClusterHandle {
  instance: string;
  kubeconfigPath: string;
  restrictedKubeconfigPath: string;
  server: string;
  adminToken: string;
  restrictedToken: string;
  namespace: 'default';
  nodeName: string;
  nodeIP: string;
  /** The API server's address on the pod network (its own "control-plane node", or the node's IP with apiServerOnNode):
   * pods reach the API here (the `kubernetes` Service's endpoint), and the aggregator's connections to APIService
   * backends come from here. */
  controlPlaneIP: string;
  caPath: string;
  /** The node's runtime, when the kubelet runs. */
  runtime?: NodeRuntime;
  controlPlane: ControlPlane;
  /** Cuts every open pods/portforward WebSocket (the tunnel-loss failure tests). */
  dropWebSockets(): void;
  /** Makes every resourceVersion seen so far too old for a watch (410 Gone), as etcd compaction does. */
  compactWatchHistory(): void;
  stop(): Promise<void>;
}

/** A Service /24 for a cluster without a node (no iptables use it, so a clash with another instance is harmless). */
function standaloneServiceNet(instance: string): string {
  return `10.96.${createHash('sha1').update(instance).digest()[0]}`;
}

export async function startCluster(options: ClusterOptions = {}): Promise<ClusterHandle> {
  const instance = options.instance ?? `sc${randomBytes(3).toString('hex')}`;
  const withKubelet = options.kubelet !== false;
  const dir = await mkdtemp(join(tmpdir(), `devop-cluster-${instance}-`));
  const cleanups: (() => Promise<void> | void)[] = [() => rm(dir, { recursive: true, force: true })];
  const cleanup = async () => {
    for (const c of cleanups.reverse()) {
      try {
        await c();
      } catch (e) {
        console.error(`stand-in ${instance}: cleanup failed:`, e);
      }
    }
  };
  try {
    let subnets: NodeSubnets | undefined;
    if (withKubelet) {
      // The Service range comes from the node's reservation, and the API server needs it first.
      subnets = await reserveSubnets(instance);
      const s = subnets;
      cleanups.push(() => s.release());
    }
    const serviceNet = subnets ? subnets.serviceCIDR.split('.').slice(0, 3).join('.') : standaloneServiceNet(instance);
    const onNode = Boolean(options.apiServerOnNode && subnets);
    const controlPlaneIP = (onNode ? subnets?.nodeIP : subnets?.controlPlaneIP) ?? '127.0.0.1';
    const names = servingNames(`${serviceNet}.1`);
    if (subnets) names.push(`IP:${controlPlaneIP}`);
    const [certs, frontProxy] = await Promise.all([makeCerts(dir, names), makeFrontProxyCerts(dir)]);
    const serviceNet6 = subnets?.serviceCIDR6?.replace(/\/112$/, '');
    const cp = await startControlPlane({
      cert: certs.certPem,
      key: certs.keyPem,
      frontProxy,
      clientCaPem: certs.caPem,
      serviceNet,
      serviceNet6,
      nodeName: NODE_NAME,
    });
    cleanups.push(() => cp.stop());
    const server = cp.api.url;
    const kubeconfigPath = join(dir, 'kubeconfig');
    const restrictedKubeconfigPath = join(dir, 'kubeconfig-restricted');
    const users = [
      { name: ADMIN_USER, token: cp.auth.adminToken },
      { name: RESTRICTED_USER, token: cp.auth.restrictedToken },
    ];
    const clusterName = `devop-standin-${instance}`;
    await writeKubeconfig({
      path: kubeconfigPath,
      clusterName,
      server,
      caPem: certs.caPem,
      users,
      current: ADMIN_USER,
      namespace: 'default',
    });
    await writeKubeconfig({
      path: restrictedKubeconfigPath,
      clusterName,
      server,
      caPem: certs.caPem,
      users: [users[1]],
      current: RESTRICTED_USER,
      namespace: 'default',
    });

    let runtime: NodeRuntime | undefined;
    let nodeIP = '127.0.0.1';
    if (withKubelet) {
      runtime = await startKubelet({
        kubeconfigPath,
        instance,
        nodeName: NODE_NAME,
        imagesDir: options.imagesDir,
        subnets,
        caPath: certs.caPath,
      });
      const rt = runtime;
      // Stop the node before the API server: the kubelet is an API client and reports pods ending.
      cleanups.push(() => rt.stop());
      nodeIP = runtime.nodeIP;
      cp.attachNode(runtime);
      // The control plane is not the node: as on a cluster whose kube-apiserver runs on a control-plane node, it has an
      // address of its own on the pod network, so pods can tell its connections (the aggregator's) from kubelet probes.
      // On the node, the API server answers on the node's own address, which the bridge already has.
      if (!onNode) {
        const cpAddress = await addControlPlaneAddress(instance, controlPlaneIP);
        cleanups.push(() => cpAddress.remove());
      }
      const relay = await listenRelay(cp, controlPlaneIP);
      cleanups.push(() => relay.close());
      // The aggregator connects from the address the API server advertises in the `kubernetes` Endpoints.
      cp.setKubernetesEndpoint(controlPlaneIP, relay.port);
      cp.registerNode(nodeIP, runtime.podCIDR);
    } else {
      cp.registerNode(nodeIP);
    }
    let stopped: Promise<void> | undefined;
    return {
      instance,
      kubeconfigPath,
      restrictedKubeconfigPath,
      server,
      adminToken: cp.auth.adminToken,
      restrictedToken: cp.auth.restrictedToken,
      namespace: 'default',
      nodeName: NODE_NAME,
      nodeIP,
      controlPlaneIP,
      caPath: certs.caPath,
      runtime,
      controlPlane: cp,
      dropWebSockets: () => cp.api.dropPortForwards(),
      compactWatchHistory: () => cp.compactWatchHistory(),
      stop: () => (stopped ??= cleanup()),
    };
  } catch (e) {
    await cleanup();
    throw e;
  }
}

/**
 * Puts the control plane's address on the node's bridge (a /32: the pod /24's route keeps the node IP as its source).
 */
async function addControlPlaneAddress(instance: string, ip: string): Promise<{ remove(): Promise<void> }> {
  const bridge = `dvb${linkTag(instance)}`;
  await run('ip', ['addr', 'add', `${ip}/32`, 'dev', bridge]);
  // The bridge goes with the node anyway; removing the address first keeps the order of start-up reversed.
  return { remove: async () => void (await runQuiet('ip', ['addr', 'del', `${ip}/32`, 'dev', bridge])) };
}

/**
 * The API server also answers on the control-plane IP (the `kubernetes` Service's endpoint), by handing connections
 * over.
 */
async function listenRelay(cp: ControlPlane, address: string): Promise<{ port: number; close(): void }> {
  const sockets = new Set<Socket>();
  const tryListen = (port: number) =>
    new Promise<Server>((resolve, reject) => {
      const s = createServer((sock) => {
        sockets.add(sock);
        sock.on('close', () => sockets.delete(sock));
        cp.api.server.emit('connection', sock);
      });
      s.once('error', reject);
      s.listen(port, address, () => resolve(s));
    });
  let s: Server;
  try {
    s = await tryListen(cp.api.port);
  } catch {
    s = await tryListen(0);
  }
  const addr = s.address();
  return {
    port: typeof addr === 'object' && addr ? addr.port : cp.api.port,
    // Stop accepting and cut what pods still hold open; waiting for them would wait for the pods.
    close() {
      s.close();
      for (const sock of sockets) sock.destroy();
    },
  };
}
