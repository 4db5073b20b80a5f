// The stand-in's kubelet: an ordinary API client (client-node, admin kubeconfig) that lists and watches the pods bound
// to its node, runs them on a KubeletNode, reports their status, records events and deletes pods once they have
// terminated.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import {
  CoreV1Api,
  KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type CoreV1Event,
  type V1Pod,
  type V1PodStatus,
  type V1Endpoints,
  type V1Service,
} from '@kubernetes/client-node';
import { repoRoot } from '../images.js';
import { imagesDir } from './containerd.js';
import type { NodeRuntime } from '../node-runtime.js';
import type { EnvSources } from './env.js';
import { EventCorrelator } from './event-recorder.js';
import { startListWatch, type ListWatch } from './list-watch.js';
import { KubeletNode } from './node.js';
import type { NodeSubnets } from './network.js';
import type { PodWorker } from './pod-worker.js';
import { ClusterDns } from './dns.js';
import { ServiceProxy } from './service-proxy.js';
import { podStatus } from './status.js';

export { KubeletNode, NodeLookupError } from './node.js';
export type { NodeSubnets } from './network.js';
export { reserveSubnets } from './subnets.js';

export interface KubeletOptions {
  kubeconfigPath: string;
  /** Unique per running cluster ([a-z0-9-]): names the netns, links, cgroup root and iptables chains. */
  instance: string;
  nodeName: string;
  /** Directory of the image archives: default $DEVOP_IMAGES_DIR, else <repo>/dist/images. */
  imagesDir?: string;
  clusterDomain?: string;
  /** Pod and Service subnets reserved with reserveSubnets (subnets.ts); reserved here when absent. */
  subnets?: NodeSubnets;
  /** The cluster CA (PEM file) for the service-account volume's ca.crt. */
  caPath?: string;
}

export interface Kubelet extends NodeRuntime {
  /** A /24 that no other running stand-in uses for ClusterIPs (the twin of podCIDR). */
  serviceCIDR: string;
}

/** A status report that fails this many times in a row waits for the pod's next change. */
const STATUS_RETRIES = 10;

function httpCode(err: unknown): number | undefined {
  return (err as { code?: number }).code;
}

function key(obj: { metadata?: { namespace?: string; name?: string } }): string {
  return `${obj.metadata?.namespace ?? ''}/${obj.metadata?.name ?? ''}`;
}

export async function startKubelet(opts: KubeletOptions): Promise<Kubelet> {
  const kc = new KubeConfig();
  kc.loadFromFile(opts.kubeconfigPath);
  const core = kc.makeApiClient(CoreV1Api);
  const services = new Map<string, V1Service>();
  const caPem = opts.caPath
    ? readFileSync(opts.caPath, 'utf8')
    : kc.getCurrentCluster()?.caData
      ? Buffer.from(kc.getCurrentCluster()!.caData!, 'base64').toString('utf8')
      : undefined;
  const endpoints = new Map<string, V1Endpoints>();
  let stopped = false;

  const readOrUndefined = async <T>(read: () => Promise<T>): Promise<T | undefined> => {
    try {
      return await read();
    } catch (err) {
      if (httpCode(err) === 404) return undefined;
      throw err;
    }
  };
  const envSources: EnvSources = {
    configMap: (namespace, name) => readOrUndefined(() => core.readNamespacedConfigMap({ namespace, name })),
    secret: (namespace, name) => readOrUndefined(() => core.readNamespacedSecret({ namespace, name })),
    services: (namespace) => [...services.values()].filter((s) => s.metadata?.namespace === namespace),
    masterService: () => services.get('default/kubernetes'),
    serviceAccountToken: async (namespace, name, expirationSeconds) => {
      try {
        const review = await core.createNamespacedServiceAccountToken({
          namespace,
          name,
          body: { spec: { audiences: [], expirationSeconds: expirationSeconds ?? 3607 } },
        });
        return review.status?.token;
      } catch {
        return undefined;
      }
    },
    caPem: () => caPem,
  };

  const correlator = new EventCorrelator();
  // One write at a time, in order, as the recorder's broadcaster does: a repeat patches the Event its first created.
  let eventWrites: Promise<void> = Promise.resolve();
  const event = (pod: V1Pod, type: 'Normal' | 'Warning', reason: string, message: string, fieldPath?: string): void => {
    if (stopped) return;
    const now = new Date();
    const namespace = pod.metadata?.namespace ?? 'default';
    const body: CoreV1Event = {
      metadata: { name: `${pod.metadata?.name}.${randomBytes(8).toString('hex')}`, namespace },
      involvedObject: {
        kind: 'Pod',
        apiVersion: 'v1',
        namespace,
        name: pod.metadata?.name,
        uid: pod.metadata?.uid,
        ...(fieldPath ? { fieldPath } : {}),
      },
      type,
      reason,
      message,
      source: { component: 'kubelet', host: opts.nodeName },
      reportingComponent: 'kubelet',
      reportingInstance: opts.nodeName,
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
    };
    const write = correlator.correlate(body, now);
    const create = () => core.createNamespacedEvent({ namespace, body: write.event });
    eventWrites = eventWrites
      .then(async () => {
        if (stopped) return;
        if (!write.patch) return void (await create());
        await core
          .patchNamespacedEvent(
            { namespace, name: write.event.metadata.name ?? '', body: write.patch },
            setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch),
          )
          .catch((err) => (httpCode(err) === 404 ? create() : Promise.reject(err)));
      })
      .catch(() => undefined); // events are best effort, as a kubelet's
  };

  // Status reports: at most one request in flight per pod; changes meanwhile are folded into the next one.
  const sent = new Map<PodWorker, { status?: V1PodStatus; json?: string; inflight: boolean; dirty: boolean }>();
  const flush = async (worker: PodWorker): Promise<void> => {
    const entry = sent.get(worker) ?? { inflight: false, dirty: false };
    sent.set(worker, entry);
    if (entry.inflight) {
      entry.dirty = true;
      return;
    }
    entry.inflight = true;
    let failures = 0;
    try {
      do {
        entry.dirty = false;
        if (stopped) return;
        const status = podStatus(worker, node.nodeIP, entry.status ?? worker.pod.status);
        const json = JSON.stringify(status);
        if (json === entry.json) continue;
        try {
          await core.patchNamespacedPodStatus(
            { namespace: worker.namespace, name: worker.name, body: { status } },
            setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
          );
          entry.status = status;
          entry.json = json;
        } catch (err) {
          // Gone, or refused for good (a status this API server will not take): the next change tries again.
          if (httpCode(err) === 404 || ++failures > STATUS_RETRIES) return;
          entry.dirty = true;
          await new Promise((r) => setTimeout(r, 200));
        }
      } while (entry.dirty && !stopped);
    } finally {
      entry.inflight = false;
    }
  };

  const node = await KubeletNode.start({
    instance: opts.instance,
    nodeName: opts.nodeName,
    imagesDir: opts.imagesDir ?? imagesDir(repoRoot()),
    envSources,
    clusterDomain: opts.clusterDomain,
    subnets: opts.subnets,
    onPodChange: (worker) => void flush(worker),
    event,
  });

  const proxy = new ServiceProxy({
    tag: node.network.tag,
    serviceCIDR: node.serviceCIDR,
    serviceCIDR6: node.network.subnets.serviceCIDR6,
    twin: (ip) => node.network.twinOf(ip),
    services: () => [...services.values()],
    endpoints: (namespace, name) => endpoints.get(`${namespace}/${name}`),
  });

  const dns = new ClusterDns(node.nodeIP, {
    domain: opts.clusterDomain ?? 'cluster.local',
    service: (namespace, name) => services.get(`${namespace}/${name}`),
    endpoints: (namespace, name) => endpoints.get(`${namespace}/${name}`),
    twin: (ip) => node.network.twinOf(ip),
  });

  const deleting = new Set<string>();
  const finishDeletion = async (pod: V1Pod): Promise<void> => {
    const uid = pod.metadata?.uid ?? '';
    const worker = node.workers.get(key(pod));
    const grace = pod.metadata?.deletionGracePeriodSeconds ?? pod.spec?.terminationGracePeriodSeconds ?? 30;
    if (deleting.has(uid)) {
      // A second delete with a shorter grace period: the termination under way ends sooner.
      if (worker && worker.uid === uid) void worker.terminate(grace);
      return;
    }
    deleting.add(uid);
    if (worker && worker.uid === uid) {
      await node.removePod(worker, grace);
      await flush(worker);
      sent.delete(worker);
    }
    if (stopped) return;
    try {
      await core.deleteNamespacedPod({
        namespace: pod.metadata?.namespace ?? 'default',
        name: pod.metadata?.name ?? '',
        gracePeriodSeconds: 0,
        body: { gracePeriodSeconds: 0, preconditions: { uid } },
      });
    } catch {
      // Already gone, or replaced by a pod of the same name (the uid precondition protects it).
    }
  };

  const onPod = (type: 'ADDED' | 'MODIFIED' | 'DELETED', pod: V1Pod): void => {
    if (stopped) return;
    const worker = node.workers.get(key(pod));
    if (type === 'DELETED') {
      if (worker && worker.uid === pod.metadata?.uid) {
        void node.removePod(worker, 0).then(() => sent.delete(worker));
      }
      return;
    }
    if (pod.metadata?.deletionTimestamp) {
      void finishDeletion(pod);
      return;
    }
    const phase = pod.status?.phase;
    if (!worker && (phase === 'Succeeded' || phase === 'Failed')) return;
    node.syncPod(pod);
  };

  const watches: ListWatch[] = [];
  try {
    await proxy.setUp();
    await dns.start();
    watches.push(
      startListWatch<V1Service>({
        kubeConfig: kc,
        path: '/api/v1/services',
        list: () => core.listServiceForAllNamespaces(),
        onList: (items) => {
          services.clear();
          for (const s of items) services.set(key(s), s);
          proxy.schedule();
        },
        onEvent: (type, s) => {
          if (type === 'DELETED') services.delete(key(s));
          else services.set(key(s), s);
          proxy.schedule();
        },
      }),
      startListWatch<V1Endpoints>({
        kubeConfig: kc,
        path: '/api/v1/endpoints',
        list: () => core.listEndpointsForAllNamespaces(),
        onList: (items) => {
          endpoints.clear();
          for (const e of items) endpoints.set(key(e), e);
          proxy.schedule();
        },
        onEvent: (type, e) => {
          if (type === 'DELETED') endpoints.delete(key(e));
          else endpoints.set(key(e), e);
          proxy.schedule();
        },
      }),
    );
    await Promise.all(watches.map((w) => w.synced));
    const fieldSelector = `spec.nodeName=${opts.nodeName}`;
    watches.push(
      startListWatch<V1Pod>({
        kubeConfig: kc,
        path: '/api/v1/pods',
        fieldSelector,
        list: () => core.listPodForAllNamespaces({ fieldSelector }),
        onList: (pods) => {
          const present = new Set(pods.map((p) => p.metadata?.uid));
          for (const worker of [...node.workers.values()]) {
            if (!present.has(worker.uid)) void node.removePod(worker, 0);
          }
          for (const pod of pods) onPod('ADDED', pod);
        },
        onEvent: onPod,
      }),
    );
    await watches[2].synced;
  } catch (err) {
    proxy.stop();
    await dns.stop();
    for (const w of watches) w.stop();
    await node.stop();
    throw err;
  }

  return {
    nodeName: node.nodeName,
    nodeIP: node.nodeIP,
    podCIDR: node.podCIDR,
    serviceCIDR: node.serviceCIDR,
    dialPod: (namespace, pod, port) => node.dialPod(namespace, pod, port),
    exec: (req) => node.exec(req),
    logs: (req) => node.logs(req),
    async stop() {
      stopped = true;
      proxy.stop();
      await proxy.settled();
      for (const w of watches) w.stop();
      await dns.stop();
      await node.stop();
    },
  };
}
