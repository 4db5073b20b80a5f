// The node's one subscription to containerd's events (`ctr events`), as containerd's CRI plugin keeps one
// (internal/cri/server/events.go): OOM kills of containers (/tasks/oom) and changes of the namespace's images
// (/images/create|update|delete), which drop the kubelet's list of images (containerd.ts ImageStore).
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { ctr, ctrArgv, type ImageEvents, K8S_NAMESPACE } from './containerd.js';

/** How long a watch of containerd's events waits before it subscribes again when ctr ended (a daemon restart). */
const EVENTS_RESUBSCRIBE_MS = 500;

/** `ctr events`' line: `<date> <time> <zone> UTC <namespace> <topic> {…}`, for this checkout's namespace. */
const EVENT = new RegExp(` ${K8S_NAMESPACE.replaceAll('.', '\\.')} (/\\S+) (\\{.*\\})$`);

/**
 * The label a subscription removes from its namespace (which never had it) to see its own /namespaces/update event:
 * from that event on, the subscription hears of every later change.
 */
const PROBE_LABEL = 'devop.standin/events-probe';
/** Probes until the subscription hears one; a kubelet whose watch never does lists images at every start. */
const PROBE_EVERY_MS = 200;
const PROBE_TRIES = 25;

export class ContainerdEvents implements ImageEvents {
  private readonly killed = new Set<string>();
  private readonly imageListeners: Array<() => void> = [];
  private child: ChildProcess | undefined;
  private live = false;
  private stopped = false;

  constructor() {
    this.subscribe();
  }

  /** True while the subscription is known to be live: a change made from now on will be heard. */
  get subscribed(): boolean {
    return this.live;
  }

  /** Calls `listener` on every change of the namespace's images, and when the subscription ends (changes unheard). */
  onImagesChanged(listener: () => void): void {
    this.imageListeners.push(listener);
  }

  /** True (once) when the container was hit by the OOM killer. */
  take(id: string): boolean {
    return this.killed.delete(id);
  }

  stop(): void {
    this.stopped = true;
    this.ended();
    this.child?.stdin?.end();
  }

  private subscribe(): void {
    // Through a shell that ends the watch when this process's end closes its stdin: a killed kubelet leaves none. The
    // shell ignores SIGINT (so does the watch, started in the background): a Ctrl-C to the process group must not end
    // the shell and leave the watch behind.
    const watch = `trap '' INT; ${ctrArgv(['events']).join(' ')} & cat >/dev/null; kill $!`;
    const child = spawn('/bin/sh', ['-c', watch], { stdio: ['pipe', 'pipe', 'ignore'] });
    this.child = child;
    const probe = `${PROBE_LABEL}-${randomBytes(4).toString('hex')}`;
    let buffered = '';
    child.stdout.setEncoding('utf8').on('data', (text: string) => {
      buffered += text;
      const lines = buffered.split('\n');
      buffered = lines.pop() ?? '';
      for (const line of lines) this.handle(line, probe);
    });
    child.on('error', () => undefined); // reported by the exit handler
    child.on('exit', () => {
      if (this.child === child) this.ended();
      if (!this.stopped) setTimeout(() => !this.stopped && this.subscribe(), EVENTS_RESUBSCRIBE_MS);
    });
    // Until its own event comes back the subscription may not be in place yet (ctr starts, then subscribes): probe
    // again until it does.
    this.probe(child, probe);
  }

  private probe(child: ChildProcess, probe: string, tries = PROBE_TRIES): void {
    if (this.live || this.child !== child || this.stopped || tries === 0) return;
    const again = () => setTimeout(() => this.probe(child, probe, tries - 1), PROBE_EVERY_MS).unref();
    // A failed label (containerd busy or restarting) is one try less.
    ctr(['namespaces', 'label', K8S_NAMESPACE, `${probe}=`]).then(again, again);
  }

  private handle(line: string, probe: string): void {
    const m = EVENT.exec(line);
    if (!m) return;
    const [, topic, body] = m;
    if (topic === '/tasks/oom') {
      const id = (JSON.parse(body) as { container_id?: string }).container_id;
      if (id) this.killed.add(id);
    } else if (topic.startsWith('/images/')) {
      for (const listener of this.imageListeners) listener();
    } else if (topic === '/namespaces/update' && body.includes(`"${probe}"`)) {
      this.live = true;
    }
  }

  private ended(): void {
    this.live = false;
    for (const listener of this.imageListeners) listener();
  }
}
