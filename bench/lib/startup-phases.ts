// Where bench:startup's time goes: marks (ms since `devop exec` was spawned) from sources that do not change what
// devop does — devop's own stderr lines as they arrive, a watch of the agent's pod (created, scheduled, its container
// running), the Events of the agent's Job and pod, and the agent container's log lines with the runtime's timestamps.
import { type CoreV1Event, CoreV1Api, type KubeConfig, type V1Pod, Watch } from '@kubernetes/client-node';
import type { ChildProcess } from 'node:child_process';
import { AGENT_LABELS } from '../../shared/agent-contract.js';

export interface PhaseMark {
  ms: number;
  what: string;
}

export class StartupPhases {
  readonly marks: PhaseMark[] = [];
  /** Wall clock at spawn: the pod watch and the container log carry wall-clock times. */
  private readonly wallStart = Date.now();
  private readonly started = performance.now();
  private abort?: AbortController;
  private eventsAbort?: AbortController;
  private agentPod?: string;
  private seen = new Set<string>();

  constructor(
    private readonly kc: KubeConfig,
    private readonly namespace: string,
  ) {}

  /** Now, in ms since spawn. */
  now(): number {
    return performance.now() - this.started;
  }

  mark(what: string, ms = this.now()): void {
    this.marks.push({ ms, what });
  }

  /** Stamps every stderr line of devop as it arrives. */
  follow(child: ChildProcess): void {
    let partial = '';
    child.stderr?.on('data', (chunk: Buffer | string) => {
      const lines = (partial + chunk.toString()).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines)
        if (line.trim()) this.mark(`devop stderr: ${line.replace(/^devop: /, '').slice(0, 90)}`);
    });
  }

  /** Watches agent pods created from now on; call before spawning devop. */
  async watchAgentPods(): Promise<void> {
    const core = this.kc.makeApiClient(CoreV1Api);
    const list = await core.listNamespacedPod({
      namespace: this.namespace,
      labelSelector: `${AGENT_LABELS.name}=${AGENT_LABELS.nameValue}`,
    });
    const known = new Set(list.items.map((p) => p.metadata?.name));
    this.abort = await new Watch(this.kc).watch(
      `/api/v1/namespaces/${this.namespace}/pods`,
      {
        labelSelector: `${AGENT_LABELS.name}=${AGENT_LABELS.nameValue}`,
        resourceVersion: list.metadata?.resourceVersion,
      },
      (phase: string, pod: V1Pod) => {
        const name = pod.metadata?.name ?? '';
        if (known.has(name) || phase === 'DELETED') return;
        this.agentPod = name;
        const once = (key: string, what: string): void => {
          if (this.seen.has(key)) return;
          this.seen.add(key);
          this.mark(what);
        };
        once('created', 'agent pod created (Job controller)');
        if (pod.spec?.nodeName) once('scheduled', 'agent pod scheduled');
        const status = pod.status?.containerStatuses?.[0];
        const waiting = status?.state?.waiting?.reason;
        if (waiting) once(`waiting ${waiting}`, `agent container waiting: ${waiting}`);
        if (status?.state?.running) once('running', 'agent container Running (pod status seen)');
      },
      () => undefined,
    );
  }

  /** Stamps the kubelet's Events of agent pods (Scheduled, Pulled, Created, Started…) as they arrive. */
  async watchAgentEvents(): Promise<void> {
    const core = this.kc.makeApiClient(CoreV1Api);
    const list = await core.listNamespacedEvent({ namespace: this.namespace });
    this.eventsAbort = await new Watch(this.kc).watch(
      `/api/v1/namespaces/${this.namespace}/events`,
      { resourceVersion: list.metadata?.resourceVersion },
      (phase: string, event: CoreV1Event) => {
        if (phase !== 'ADDED' || !event.involvedObject?.name?.startsWith('devop-agent-')) return;
        this.mark(`event ${event.involvedObject.kind} ${event.reason}: ${(event.message ?? '').slice(0, 60)}`);
      },
      () => undefined,
    );
  }

  /** The agent container's log lines (runtime timestamps) since spawn; then stops the watch. */
  async finish(): Promise<void> {
    this.abort?.abort();
    this.eventsAbort?.abort();
    if (!this.agentPod) return;
    const core = this.kc.makeApiClient(CoreV1Api);
    const text = await core
      .readNamespacedPodLog({ name: this.agentPod, namespace: this.namespace, timestamps: true })
      .catch(() => '');
    for (const line of String(text).split('\n').slice(0, 6)) {
      const m = /^(\S+) (.*)$/.exec(line);
      if (!m) continue;
      this.mark(`agent log: ${m[2].slice(0, 80)}`, Date.parse(m[1]) - this.wallStart);
    }
  }

  /** The marks in time order, each with the step from the one before. */
  table(): string {
    const sorted = [...this.marks].sort((a, b) => a.ms - b.ms);
    return sorted
      .map((m, i) => {
        const delta = i === 0 ? m.ms : m.ms - sorted[i - 1].ms;
        return `  ${m.ms.toFixed(0).padStart(6)} ms  +${delta.toFixed(0).padStart(5)}  ${m.what}`;
      })
      .join('\n');
  }
}
