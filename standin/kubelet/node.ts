// The node as a NodeRuntime: its network and containerd, one PodWorker per pod, and the port-forward / exec / log
// backends the API server calls. It knows nothing of the API: the kubelet (index.ts) feeds it pods and reports
// statuses.
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Duplex, Readable } from 'node:stream';
import type { V1Pod } from '@kubernetes/client-node';
import { UserError } from '../../shared/errors.js';
import type { ExecProcess, ExecRequest, LogRequest, NodeRuntime } from '../node-runtime.js';
import { ensureContainerd, importImages, ImageStore, instanceRunDir, removeInstanceContainers } from './containerd.js';
import { ContainerdEvents } from './containerd-events.js';
import type { EnvSources } from './env.js';
import { buildHelper } from './host.js';
import { readContainerLog } from './logs.js';
import { NodeNetwork, type NodeSubnets } from './network.js';
import { reserveSubnets } from './subnets.js';
import { boundingCapabilities } from './oci-spec.js';
import { PodWorker } from './pod-worker.js';
import { currentAttempt, isRunning, type ContainerRecord } from './records.js';

export interface NodeOptions {
  instance: string;
  nodeName: string;
  /** Directory of the image archives (*.oci.tar) imported into containerd at start. */
  imagesDir: string;
  envSources: EnvSources;
  clusterDomain?: string;
  /** Subnets reserved beforehand (startCluster reserves them first: the API server needs the Service range). */
  subnets?: NodeSubnets;
  onPodChange(worker: PodWorker): void;
  event(pod: V1Pod, type: 'Normal' | 'Warning', reason: string, message: string, fieldPath?: string): void;
}

/** A lookup failure that the API server should answer with 404 (pod/container) or 400 (not running). */
export class NodeLookupError extends Error {
  constructor(
    message: string,
    readonly status: 400 | 404,
  ) {
    super(message);
  }
}

export class KubeletNode implements NodeRuntime {
  readonly workers = new Map<string, PodWorker>();
  private sandboxCount = 0;
  private readonly boundingCapabilities = boundingCapabilities();
  private events!: ContainerdEvents;
  private images = new ImageStore();
  private loggerPath = '';
  private execReaperPath = '';
  private stopped = false;

  private constructor(
    private readonly opts: NodeOptions,
    readonly network: NodeNetwork,
    readonly stateDir: string,
    readonly volumesDir: string,
  ) {}

  /** Starts containerd if the machine's is not running, imports images, sets up the bridge and the iptables FORWARD
   * chain; undoes it all if a step fails. */
  static async start(opts: NodeOptions): Promise<KubeletNode> {
    if (!/^[a-z0-9][a-z0-9-]{0,39}$/.test(opts.instance)) {
      throw new UserError(
        `stand-in instance "${opts.instance}" is not a valid name`,
        'use lower-case letters, digits and dashes, at most 40 characters',
      );
    }
    const subnets = opts.subnets ?? (await reserveSubnets(opts.instance));
    const network = new NodeNetwork(opts.instance, subnets);
    const stateDir = join('/run/devop-kubelet', opts.instance);
    const node = new KubeletNode(opts, network, stateDir, join('/var/lib/devop-kubelet', opts.instance));
    try {
      await ensureContainerd();
      await importImages(opts.imagesDir);
      node.events = new ContainerdEvents();
      node.images = new ImageStore(node.events);
      const runDir = instanceRunDir(opts.instance);
      [node.loggerPath, node.execReaperPath] = await Promise.all([
        buildHelper('container-logger', runDir),
        buildHelper('exec-reaper', runDir),
      ]);
      mkdirSync(stateDir, { recursive: true });
      await network.setUp();
    } catch (err) {
      await node.stop();
      throw err;
    }
    return node;
  }

  get nodeName(): string {
    return this.opts.nodeName;
  }

  get nodeIP(): string {
    return this.network.nodeIP;
  }

  get podCIDR(): string {
    return this.network.subnets.podCIDR;
  }

  get serviceCIDR(): string {
    return this.network.subnets.serviceCIDR;
  }

  static key(namespace: string, name: string): string {
    return `${namespace}/${name}`;
  }

  /** Starts a worker for a pod the node has not seen, or hands a newer version to the existing one. */
  syncPod(pod: V1Pod): PodWorker | undefined {
    if (this.stopped) return undefined;
    const key = KubeletNode.key(pod.metadata?.namespace ?? 'default', pod.metadata?.name ?? '');
    const existing = this.workers.get(key);
    if (existing && existing.uid === pod.metadata?.uid) {
      existing.update(pod);
      return existing;
    }
    if (existing) void this.removePod(existing, 0);
    const worker = new PodWorker(pod, {
      nodeName: this.opts.nodeName,
      nodeIP: this.nodeIP,
      network: this.network,
      instance: this.opts.instance,
      images: this.images,
      events: this.events,
      loggerPath: this.loggerPath,
      execReaperPath: this.execReaperPath,
      boundingCapabilities: this.boundingCapabilities,
      envSources: this.opts.envSources,
      stateDir: this.stateDir,
      volumesDir: this.volumesDir,
      clusterDomain: this.opts.clusterDomain ?? 'cluster.local',
      sandboxNames: () => {
        const n = (++this.sandboxCount).toString(36);
        return { netns: `dvk-${this.opts.instance}-${n}`, hostVeth: `dvv${this.network.tag}${n}` };
      },
      onChange: (w) => this.opts.onPodChange(w),
      event: this.opts.event,
    });
    this.workers.set(key, worker);
    worker.run().catch((err: Error) => {
      this.opts.event(pod, 'Warning', 'Failed', `kubelet: ${err.message}`);
    });
    return worker;
  }

  /** Terminates a pod's containers and sandbox; the worker is forgotten once it is gone. */
  async removePod(worker: PodWorker, gracePeriodSeconds: number): Promise<void> {
    await worker.terminate(gracePeriodSeconds);
    const key = KubeletNode.key(worker.namespace, worker.name);
    if (this.workers.get(key) === worker) this.workers.delete(key);
  }

  private worker(namespace: string, pod: string): PodWorker {
    const worker = this.workers.get(KubeletNode.key(namespace, pod));
    if (!worker) throw new NodeLookupError(`pod "${pod}" not found on node ${this.nodeName}`, 404);
    return worker;
  }

  private container(worker: PodWorker, name?: string): ContainerRecord {
    const defaultName = worker.pod.metadata?.annotations?.['kubectl.kubernetes.io/default-container'];
    const wanted = name ?? defaultName ?? worker.recordsOf('regular')[0]?.name;
    const rec = wanted ? worker.records.get(wanted) : undefined;
    if (!rec) throw new NodeLookupError(`container ${wanted} is not valid for pod ${worker.name}`, 404);
    return rec;
  }

  async dialPod(namespace: string, pod: string, port: number): Promise<Duplex> {
    const worker = this.worker(namespace, pod);
    if (!worker.dialer) throw new NodeLookupError(`pod ${pod} has no network namespace yet`, 400);
    return worker.dialer.dial(port);
  }

  async exec(req: ExecRequest): Promise<ExecProcess> {
    const worker = this.worker(req.namespace, req.pod);
    const rec = this.container(worker, req.container);
    if (!isRunning(rec)) throw new NodeLookupError(`container ${rec.name} is not running (pod ${worker.name})`, 400);
    return worker.execProcess(rec, req.command, req.stdin, req.tty);
  }

  async logs(req: LogRequest): Promise<Readable> {
    const worker = this.worker(req.namespace, req.pod);
    const rec = this.container(worker, req.container);
    const index = rec.attempts.length - (req.previous ? 2 : 1);
    const attempt = rec.attempts[index];
    if (!attempt) {
      if (req.previous)
        throw new NodeLookupError(`previous terminated container "${rec.name}" in pod "${worker.name}" not found`, 400);
      const reason = rec.waiting?.reason ?? 'ContainerCreating';
      throw new NodeLookupError(`container "${rec.name}" in pod "${worker.name}" is waiting to start: ${reason}`, 400);
    }
    const current = currentAttempt(rec) === attempt;
    return readContainerLog(attempt.logPath, {
      follow: req.follow && current,
      tailLines: req.tailLines,
      timestamps: req.timestamps,
      ended: () => !attempt.proc || attempt.proc.logEnded,
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all([...this.workers.values()].map((w) => this.removePod(w, 0)));
    this.events?.stop();
    await removeInstanceContainers(this.opts.instance);
    await this.network.tearDown();
    rmSync(this.stateDir, { recursive: true, force: true });
    rmSync(this.volumesDir, { recursive: true, force: true });
  }
}
