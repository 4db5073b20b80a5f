// The session's subscriptions: subscribe each port, switch mode or filter, pause and resume, release; bound to the
// reporter's keys (the TUI's) once the session is ready.
import { UserError } from '../../../shared/errors.js';
import { compileHeaderFilter } from '../../../shared/filter-regex.js';
import { FEATURES, type HttpFilter, type StealMode, type TlsMaterial } from '../../../shared/protocol.js';
import { followAvailable } from '../../kube/apiservice-status.js';
import { error, type PortState, type Reporter, type SessionInfo } from '../../reporter.js';
import type { Retarget, Session } from '../../session/connect.js';
import { agentRequest } from '../../session/tunnel.js';
import { formatAvailable } from '../../ui/lines.js';
import type { ExecServiceOptions } from './options.js';
import { describeFilter } from './session-info.js';

/** The session's subscriptions: subscribe, switch mode/filter, pause/resume, release; bound to the reporter's keys. */
export class TrafficControl {
  private readonly subscriptions = new Map<number, string>();
  private mode: StealMode;
  private filter: HttpFilter | undefined;
  private ready = false;
  private stopFollowing: (() => void) | undefined;

  constructor(
    private readonly session: Session,
    private readonly info: SessionInfo,
    private readonly options: Pick<ExecServiceOptions, 'mode' | 'httpFilter' | 'flush' | 'stealProbes'> & {
      /** Per port, the workload's TLS material (--tls-secret): sent with a filtered steal's subscribe only. */
      tls?: Map<number, TlsMaterial>;
    },
    private readonly reporter: Reporter,
  ) {
    this.mode = options.mode;
    this.filter = options.httpFilter;
  }

  async subscribeAll(): Promise<void> {
    await Promise.all(this.info.ports.map((p) => this.subscribe(p.remotePort)));
  }

  private async subscribe(port: number): Promise<void> {
    const { tunnel, hello } = this.session;
    if (this.filter?.body && !hello.features.includes(FEATURES.bodyFilter))
      throw new UserError(
        `agent ${hello.agentVersion} does not read request bodies: --http-body-filter cannot be applied`,
        'use the agent image of this devop version (devop clean, then run again), or drop --http-body-filter',
      );
    const tls = this.filter && this.mode === 'steal' ? this.options.tls?.get(port) : undefined;
    if (tls && !hello.features.includes(FEATURES.tlsTerminate))
      throw new UserError(
        `agent ${hello.agentVersion} does not end TLS: --tls-secret cannot be applied`,
        'use the agent image of this devop version (devop clean, then run again), or drop --tls-secret',
      );
    const answer = await agentRequest(
      tunnel,
      (id) =>
        tunnel.send({
          type: 'subscribe',
          id,
          port,
          mode: this.mode,
          ...(this.filter ? { filter: this.filter } : {}),
          flush: this.options.flush,
          stealProbes: this.options.stealProbes,
          ...(this.mode === 'steal' && this.info.answerWithinMs ? { answerWithinMs: this.info.answerWithinMs } : {}),
          ...(tls ? { tls } : {}),
        }),
      ['subscribed', 'refused'],
      `${this.mode} port ${port}`,
    );
    if (answer.type === 'subscribed') {
      this.subscriptions.set(port, answer.id);
      return;
    }
    if (answer.type === 'refused') {
      const who = answer.holder ? `${answer.holder.user}@${answer.holder.host}` : undefined;
      const holder = who && !answer.reason.includes(who) ? ` (held by ${who} since ${answer.holder!.since})` : '';
      // The agent's own fix when it gives one (a capability its container lacks, a bad filter); else the port is held.
      const fix =
        answer.hint ?? 'use --http-header-filter to share the port, --mirror, or wait until the other session ends';
      throw new UserError(
        `port ${port} of pod ${this.info.pod} cannot be ${this.mode === 'steal' ? 'stolen' : 'mirrored'}: ` +
          `${answer.reason}${holder}`,
        fix,
      );
    }
    throw new UserError(
      `the agent refused to ${this.mode} port ${port}: ${answer.message}`,
      answer.hint ?? 'check the agent logs (rerun with --verbose)',
    );
  }

  private async unsubscribeAll(): Promise<void> {
    const { tunnel } = this.session;
    const entries = [...this.subscriptions];
    this.subscriptions.clear();
    await Promise.all(
      entries.map(([port, id]) =>
        // An unsubscribe names the subscription (its subscribe id); the answer carries the same id.
        agentRequest(
          tunnel,
          () => tunnel.send({ type: 'unsubscribe', id, port }),
          ['unsubscribed'],
          `release port ${port}`,
          id,
        ).catch(() => undefined),
      ),
    );
  }

  markReady(): void {
    if (this.ready) return;
    this.ready = true;
    if (this.info.extension) this.info.extension.pods = this.session.podNames?.().length ?? 1;
    this.reporter.emit({ type: 'ready', session: this.info });
    this.followExtension();
    this.reporter.attachControls?.({
      setMode: async (mode) => {
        this.mode = mode;
        await this.resubscribe();
      },
      setHeaderFilter: async (header) => {
        // Checked before the resubscribe below lets the ports go: a pattern the agent would refuse is refused here.
        if (header) compileHeaderFilter(header, 'the header filter');
        const rest = { ...(this.filter ?? { match: 'all' as const }) };
        delete rest.header;
        this.filter = header ? { ...rest, header } : rest.path || rest.method ? rest : undefined;
        await this.resubscribe();
      },
      pause: async () => {
        this.session.tunnel.send({ type: 'pause' });
        this.update({ paused: true });
      },
      resume: async () => {
        this.session.tunnel.send({ type: 'resume' });
        this.update({ paused: false });
      },
      stop: async () => {
        process.kill(process.pid, 'SIGTERM');
      },
    });
  }

  private async resubscribe(): Promise<void> {
    await this.unsubscribeAll();
    await this.subscribeAll().catch((err: unknown) => error(this.reporter, err));
    this.update({ mode: this.mode, filter: describeFilter(this.filter) });
  }

  /** An APIService's Available condition is kept current in the header (and said as a line when it changes). */
  private followExtension(): void {
    const extension = this.info.extension;
    if (!extension) return;
    this.stopFollowing = followAvailable(this.session.kc, extension.name, extension.available, (available) => {
      this.info.extension = { ...(this.info.extension ?? extension), available };
      this.reporter.emit({
        type: 'log',
        level: available.status === 'True' ? 'info' : 'warn',
        message: `${extension.kind} ${extension.name} is now ${formatAvailable(available)}`,
      });
      this.reporter.emit({ type: 'session', session: { ...this.info } });
    });
  }

  /** The session followed its target to another pod: the session line names the new pod and its agent. */
  retarget(change: Retarget): void {
    this.info.pod = change.target.podName;
    this.info.node = change.target.nodeName;
    this.info.agent = { name: change.agent.name, reused: change.agent.reused, version: change.agentVersion };
    this.reporter.emit({ type: 'session', session: { ...this.info } });
  }

  private update(change: Partial<PortState>): void {
    this.info.ports = this.info.ports.map((p) => ({ ...p, ...change }));
    this.reporter.emit({ type: 'session', session: { ...this.info } });
  }

  async release(): Promise<void> {
    this.stopFollowing?.();
    if (this.session.tunnel.closed) return;
    await this.unsubscribeAll();
  }
}
