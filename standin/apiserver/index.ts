// The control plane: storage, the HTTPS API server, the aggregator and the in-process controllers, seeded with the
// namespaces, service accounts and `kubernetes` Service a fresh cluster has.
import type { FrontProxyCerts } from '../certs.js';
import type { NodeRuntime } from '../node-runtime.js';
import { Aggregator } from './aggregator.js';
import { Authenticator } from './auth.js';
import { Catalog } from './catalog.js';
import { disruptionController } from './controllers/disruption.js';
import { endpointsController } from './controllers/endpoints.js';
import { garbageCollector, namespaceController } from './controllers/gc.js';
import { jobController } from './controllers/job.js';
import { runController, type RunningController } from './controllers/loop.js';
import { scheduler } from './controllers/scheduler.js';
import { deploymentController, replicaSetController } from './controllers/workloads.js';
import type { K8sObject } from './errors.js';
import { nowTime, Objects } from './objects.js';
import { startApiServer, type ApiServer } from './server.js';
import { Store } from './store.js';

export interface ControlPlaneOptions {
  cert: string;
  key: string;
  /** First three octets of the Service range; `<serviceNet>.1` is the `kubernetes` Service. */
  serviceNet: string;
  /** The IPv6 Service range's prefix (its /112) on a dual-stack cluster, e.g. `fd00:244:7:1::`. */
  serviceNet6?: string;
  nodeName: string;
  /** The aggregator's front-proxy CA and client certificate; none: it presents no client certificate. */
  frontProxy?: FrontProxyCerts;
  /** The CA of client certificates, published as client-ca-file. */
  clientCaPem?: string;
}

export interface ControlPlane {
  objects: Objects;
  auth: Authenticator;
  api: ApiServer;
  /** Called once the node exists: pods are then deleted gracefully and exec/logs/port-forward reach it. */
  attachNode(runtime: NodeRuntime): void;
  /** Creates or refreshes the Node object for this node. */
  registerNode(nodeIP: string, podCIDR?: string): void;
  /** Points the `kubernetes` Service's endpoints at an address pods can reach. */
  setKubernetesEndpoint(ip: string, port: number): void;
  /** Forget watch history: every resourceVersion seen so far becomes too old (410 Gone); open watches end, as when
   * kube-apiserver restarts after an etcd compaction, so clients resume from a version that is now Gone. */
  compactWatchHistory(): void;
  stop(): Promise<void>;
}

export const KUBERNETES_VERSION = 'v1.32.0';

export async function startControlPlane(o: ControlPlaneOptions): Promise<ControlPlane> {
  const store = new Store();
  const catalog = new Catalog(store);
  let runtime: NodeRuntime | undefined;
  const objects = new Objects(store, catalog, {
    gracefulPods: () => runtime !== undefined,
    serviceNet: o.serviceNet,
    serviceNet6: o.serviceNet6,
  });
  const auth = new Authenticator();
  const aggregator = new Aggregator(objects, o.frontProxy && { cert: o.frontProxy.certPem, key: o.frontProxy.keyPem });
  const api = await startApiServer({
    cert: o.cert,
    key: o.key,
    objects,
    catalog,
    auth,
    aggregator,
    runtime: () => runtime,
  });

  const t = (key: string) => objects.type(key);
  for (const ns of ['default', 'kube-system', 'kube-public', 'kube-node-lease']) {
    objects.create(t('/namespaces'), '', { metadata: { name: ns } });
    objects.create(t('/serviceaccounts'), ns, { metadata: { name: 'default' } });
  }
  if (o.frontProxy) {
    // What kube-apiserver publishes for aggregated servers to authenticate its proxied requests by (kubernetes
    // pkg/controlplane/controller/clusterauthenticationtrust/cluster_authentication_trust_controller.go; kubeadm's
    // front-proxy-client name and X-Remote-* headers).
    objects.create(t('/configmaps'), 'kube-system', {
      metadata: { name: 'extension-apiserver-authentication' },
      data: {
        ...(o.clientCaPem ? { 'client-ca-file': o.clientCaPem } : {}),
        'requestheader-client-ca-file': o.frontProxy.caPem,
        'requestheader-allowed-names': JSON.stringify(['front-proxy-client']),
        'requestheader-username-headers': JSON.stringify(['X-Remote-User']),
        'requestheader-group-headers': JSON.stringify(['X-Remote-Group']),
        'requestheader-extra-headers-prefix': JSON.stringify(['X-Remote-Extra-']),
      },
    });
  }
  objects.create(t('/services'), 'default', {
    metadata: { name: 'kubernetes', labels: { component: 'apiserver', provider: 'kubernetes' } },
    spec: {
      clusterIP: `${o.serviceNet}.1`,
      ports: [{ name: 'https', port: 443, protocol: 'TCP', targetPort: api.port }],
      type: 'ClusterIP',
    },
  });
  const setKubernetesEndpoint = (ip: string, port: number) => {
    const body: K8sObject = {
      metadata: {
        name: 'kubernetes',
        namespace: 'default',
        labels: { 'endpointslice.kubernetes.io/skip-mirror': 'true' },
      },
      subsets: [{ addresses: [{ ip }], ports: [{ name: 'https', port, protocol: 'TCP' }] }],
    };
    const cur = objects.tryGet(t('/endpoints'), 'default', 'kubernetes');
    if (cur) objects.update(t('/endpoints'), 'default', 'kubernetes', { ...cur, subsets: body.subsets });
    else objects.create(t('/endpoints'), 'default', body);
  };
  setKubernetesEndpoint('127.0.0.1', api.port);

  const controllers: RunningController[] = [
    garbageCollector,
    namespaceController,
    deploymentController,
    replicaSetController,
    jobController,
    endpointsController,
    disruptionController,
    scheduler(o.nodeName),
  ].map((c) => runController(objects, c));
  aggregator.start();

  return {
    objects,
    auth,
    api,
    attachNode(r) {
      runtime = r;
    },
    registerNode(nodeIP, podCIDR) {
      const now = nowTime();
      const status = {
        addresses: [
          { type: 'InternalIP', address: nodeIP },
          { type: 'Hostname', address: o.nodeName },
        ],
        capacity: { cpu: '2', memory: '8Gi', pods: '110', 'ephemeral-storage': '20Gi' },
        allocatable: { cpu: '2', memory: '8Gi', pods: '110', 'ephemeral-storage': '20Gi' },
        conditions: [
          {
            type: 'MemoryPressure',
            status: 'False',
            reason: 'KubeletHasSufficientMemory',
            message: 'kubelet has sufficient memory available',
            lastHeartbeatTime: now,
            lastTransitionTime: now,
          },
          {
            type: 'DiskPressure',
            status: 'False',
            reason: 'KubeletHasNoDiskPressure',
            message: 'kubelet has no disk pressure',
            lastHeartbeatTime: now,
            lastTransitionTime: now,
          },
          {
            type: 'PIDPressure',
            status: 'False',
            reason: 'KubeletHasSufficientPID',
            message: 'kubelet has sufficient PID available',
            lastHeartbeatTime: now,
            lastTransitionTime: now,
          },
          {
            type: 'Ready',
            status: 'True',
            reason: 'KubeletReady',
            message: 'kubelet is posting ready status',
            lastHeartbeatTime: now,
            lastTransitionTime: now,
          },
        ],
        daemonEndpoints: { kubeletEndpoint: { Port: 10250 } },
        nodeInfo: {
          machineID: '',
          systemUUID: '',
          bootID: '',
          kernelVersion: '',
          osImage: 'devop stand-in',
          containerRuntimeVersion: 'containerd://1.7.22',
          kubeletVersion: KUBERNETES_VERSION,
          kubeProxyVersion: KUBERNETES_VERSION,
          operatingSystem: 'linux',
          architecture: 'amd64',
        },
      };
      const labels = {
        'kubernetes.io/hostname': o.nodeName,
        'kubernetes.io/os': 'linux',
        'kubernetes.io/arch': 'amd64',
      };
      const nodeType = t('/nodes');
      const cur = objects.tryGet(nodeType, '', o.nodeName);
      const base =
        cur ??
        objects.create(nodeType, '', {
          metadata: { name: o.nodeName, labels },
          spec: podCIDR ? { podCIDR, podCIDRs: [podCIDR] } : {},
          status,
        });
      const addresses = (base.status?.addresses ?? []).filter((a: K8sObject) => a.type !== 'InternalIP');
      objects.update(
        nodeType,
        '',
        o.nodeName,
        {
          ...base,
          status: {
            ...status,
            ...(base.status ?? {}),
            addresses: [{ type: 'InternalIP', address: nodeIP }, ...addresses],
          },
        },
        { subresource: 'status' },
      );
    },
    setKubernetesEndpoint,
    compactWatchHistory: () => {
      store.compact();
      api.endWatches();
    },
    async stop() {
      for (const c of controllers) c.stop();
      aggregator.stop();
      await api.close();
    },
  };
}
