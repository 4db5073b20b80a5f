// `devop exec`: connect a session, start the local command with the pod's env, and — once it listens — steal or mirror
// the pod's ports to it; stop cleanly on Ctrl-C, the command's exit or an error. Returns the command's exit code.
import { UserError } from '../../shared/errors.js';
import { compileHeaderFilter } from '../../shared/filter-regex.js';
import type { HttpFilter, StealMode } from '../../shared/protocol.js';
import { FEATURES } from '../../shared/protocol.js';
import { error, info, type PortState, type Reporter, type SessionInfo, step, warn } from '../reporter.js';
import { startLocalCommand, type LocalCommand } from '../process/child.js';
import { canConnect, waitForListen } from '../process/listen.js';
import { AGENT_VERSION } from '../../shared/version.js';
import { apiServerSource } from '../kube/api-server-source.js';
import { followAvailable } from '../kube/apiservice-status.js';
import { formatAvailable } from '../ui/lines.js';
import type { ExchangeRecorder } from '../record/tap.js';
import { buildChildEnv, readEnvFile, withheldLine } from './child-env.js';
import type { ShadowSettings } from '../shadow/kubeconfig.js';
import { incomingStreamHandler } from './incoming.js';
import { answerDeadlineMs } from '../kube/targets/webhook.js';
import { resolvePorts, type PortMapping } from './ports.js';
import {
  SESSION_DEFAULTS,
  type ChildEnvHook,
  type Retarget,
  type Session,
  type SessionOptions,
} from '../session/connect.js';
import { connectSupervisedSession } from '../session/supervisor.js';
import { trafficToEvent } from '../session/traffic.js';
import { agentRequest } from '../session/tunnel.js';
import { startReplaceStep, type ReplaceStep } from '../replace/stage.js';

export interface ExecServiceOptions extends SessionOptions {
  command: string;
  args: string[];
  mode: StealMode;
  /** REMOTE[:LOCAL] specs; empty = the container's declared ports. */
  ports: (string | number)[];
  httpFilter?: HttpFilter;
  flush: boolean;
  stealProbes: boolean;
  /** allow: exact names of code-loading pod vars to give the command anyway (cli/services/child-env.ts). */
  env: { include: string[]; exclude: string[]; allow?: string[]; override: Record<string, string>; file?: string };
  /** --shadow: the command's kubeconfig points at the shadow API proxy (cli/shadow/kubeconfig.ts; commands/exec.ts adds
   * its hook). */
  shadow?: ShadowSettings;
  /** Hooks that add to the child env once the session is up (e.g. the outgoing proxy); each may return a cleanup. */
  childEnvHooks?: ChildEnvHook[];
  cwd?: string;
  /** `--record FILE`: every stolen HTTP exchange is written there as HAR 1.2. */
  record?: string;
  /** `--record-secrets`: the HAR keeps credentials (redacted otherwise). */
  recordSecrets?: boolean;
  /** Run in place of the target workload (cli/replace/stage.ts). */
  replace?: boolean;
}

/**
 * When the command has ended, how long a start-up step still running may take to report its end before the exit line:
 * the listen step ends within ms; a subscribe in flight is not waited for longer than this.
 */
const STEP_SETTLE_MS = 1000;

export function describeFilter(filter: HttpFilter | undefined): string | undefined {
  if (!filter) return undefined;
  const parts = [
    filter.header && `header ${filter.header}`,
    filter.path && `path ${filter.path}`,
    filter.method && `method ${filter.method}`,
  ].filter(Boolean);
  return parts.length ? parts.join(filter.match === 'any' ? ' or ' : ' and ') : undefined;
}

/** `--record FILE`: the HAR is written at once (a bad path fails before anything starts) and after each exchange. */
async function startRecording(
  path: string,
  mode: StealMode,
  reporter: Reporter,
  keepSecrets = false,
): Promise<{ recorder: ExchangeRecorder; stop(): Promise<void> }> {
  const [{ HarRecorder }, { ExchangeRecorder }] = await Promise.all([
    import('../record/har.js'),
    import('../record/tap.js'),
  ]);
  const recordWarning = (message: string): void => warn(reporter, message);
  const har = new HarRecorder(path, AGENT_VERSION, recordWarning, { keepSecrets });
  await har.start();
  if (keepSecrets)
    recordWarning(`--record-secrets: ${path} keeps credentials and Secret values in clear (the file is 0600)`);
  if (mode !== 'steal')
    recordWarning(
      `--record writes stolen exchanges only: with --mirror, ${path} stays empty until you switch to steal`,
    );
  return {
    recorder: new ExchangeRecorder(har, recordWarning),
    async stop() {
      await har.flush();
      info(
        reporter,
        `recorded ${har.size} HTTP exchange${har.size === 1 ? '' : 's'} to ${path} (devop replay ${path})`,
      );
    },
  };
}

/**
 * An extension target (an APIService, webhook configurations) is called by the API server: when it connects from the
 * pod's node address (a single-node cluster), stealing must take the node's connections too, as --steal-probes does;
 * else they are left to the pod.
 */
async function extensionStealsNode(
  session: Session,
  options: ExecServiceOptions,
  reporter: Reporter,
): Promise<boolean> {
  const target = session.target;
  const what = target?.extension
    ? `apiservice ${target.extension.name}`
    : target?.webhooks
      ? `${target.ref.kind} ${target.ref.name}`
      : undefined;
  if (!target || !what || options.mode !== 'steal') return false;
  const source = await apiServerSource(session.kc, target.pod);
  if (!source.known) {
    warn(
      reporter,
      `${what}: cannot tell where the API server connects from (${source.why}); connections from the node stay ` +
        "with the pod: add --steal-probes if the API server runs on the pod's node",
    );
    return false;
  }
  info(
    reporter,
    source.onPodNode
      ? `${what}: the API server connects from the node's address ${source.nodeIP}: connections from the node are ` +
          'taken too (kubelet probes with them: the local command answers them)'
      : `${what}: the API server connects from ${source.addresses.join(', ')}, not the node's address: ` +
          'kubelet probes stay with the pod',
  );
  return source.onPodNode;
}

async function readRemoteEnv(session: Session): Promise<Record<string, string>> {
  if (!session.hello.features.includes(FEATURES.env)) return {};
  const answer = await agentRequest(
    session.tunnel,
    (id) => session.tunnel.send({ type: 'envRead', id }),
    ['env'],
    'read the pod env',
  );
  if (answer.type === 'error')
    throw new UserError(
      `the agent could not read the pod's env: ${answer.message}`,
      answer.hint ?? 'check the agent logs',
    );
  return answer.vars;
}

export async function runExec(options: ExecServiceOptions, reporter: Reporter): Promise<number> {
  const abort = new AbortController();
  // Before the local command runs, a signal stops the start-up; afterwards it goes to the command (child.ts).
  const onStartupSignal = (signal: NodeJS.Signals): void =>
    abort.abort(new UserError(`stopped by ${signal} during start-up`, 'run again'));
  const startupSignals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
  for (const s of startupSignals) process.on(s, onStartupSignal);
  const dropStartupSignals = (): void => {
    for (const s of startupSignals) process.off(s, onStartupSignal);
  };
  let session: Session | undefined;
  let child: LocalCommand | undefined;
  let replacement: ReplaceStep | undefined;
  const cleanups: (() => Promise<void>)[] = [];
  try {
    // First: a --record path that cannot be written is one line before any cluster call (no Job, no env read).
    const recording = options.record
      ? await startRecording(options.record, options.mode, reporter, options.recordSecrets)
      : undefined;
    if (recording) cleanups.push(() => recording.stop());
    // --replace: the session targets a copy of the workload's pod (the workload itself is scaled to 0). Not raced with
    // the abort: a signal during it is seen right after, and the finally below restores what it did.
    let sessionOptions: ExecServiceOptions = options;
    if (options.replace) {
      replacement = await startReplaceStep(options, reporter);
      sessionOptions = { ...options, ...replacement.session };
      abort.signal.throwIfAborted();
    }
    session = await raceAbort(
      connectSupervisedSession({ ...sessionOptions, signal: abort.signal }, reporter),
      abort.signal,
    );
    const s = session;
    const target = s.target;
    if (!target && options.ports.length > 0)
      throw new UserError(
        '-p/--port needs a target: a targetless session receives no traffic',
        'pass -t pod/NAME or deploy/NAME, or drop -p',
      );
    // Replaced without --steal, the copy has none of the workload's labels: no Service sends it traffic.
    const ports =
      options.replace && options.mode !== 'steal' ? [] : resolvePorts(options.ports, target?.container, target?.ports);
    const stealProbes = options.stealProbes || (await extensionStealsNode(s, options, reporter));

    const childEnv = await step(
      reporter,
      'env',
      'environment',
      async () => {
        const [remoteEnv, envFile] = await Promise.all([
          readRemoteEnv(s),
          options.env.file ? readEnvFile(options.env.file) : Promise.resolve(undefined),
        ]);
        let env = buildChildEnv({
          localEnv: process.env,
          remoteEnv,
          include: options.env.include,
          exclude: options.env.exclude,
          allow: options.env.allow,
          override: options.env.override,
          envFile,
          onWithheld: (names) => warn(reporter, withheldLine(names)),
        });
        for (const hook of options.childEnvHooks ?? []) {
          const result = await hook(env, { session: s, reporter });
          env = result.env;
          if (result.cleanup) cleanups.push(result.cleanup);
        }
        return { env, remoteCount: Object.keys(remoteEnv).length };
      },
      (v) => `${v.remoteCount} variables from the pod`,
    );
    abort.signal.throwIfAborted();

    s.tunnel.on(
      'stream',
      incomingStreamHandler({
        ports,
        onError: (message) => warn(reporter, message),
        recorder: recording?.recorder,
        onConnection: (connection, pod) => {
          const event = trafficToEvent(connection, pod ?? target?.podName);
          if (event) reporter.emit(event);
        },
      }),
    );
    s.tunnel.on('message', (msg) => {
      if (msg.type === 'traffic') {
        const event = trafficToEvent(msg.event, target?.podName);
        if (event) reporter.emit(event);
      } else if (msg.type === 'log') {
        reporter.emit({
          type: 'log',
          level: msg.level === 'error' ? 'warn' : msg.level,
          message: `agent: ${msg.message}`,
        });
      } else if (msg.type === 'error' && msg.id === undefined) {
        reporter.emit({ type: 'error', message: `agent: ${msg.message}`, hint: msg.hint });
      }
    });

    // A port that accepts connections before the local command started is another process's: "the local command
    // listens" would be true at once, `ready` would follow, and that process would get the pod's traffic.
    const taken = (await Promise.all(ports.map(async (p) => ((await canConnect(p.local)) ? p : undefined)))).filter(
      (p) => p !== undefined,
    );
    if (taken.length > 0) {
      const where = taken.map((p) => `127.0.0.1:${p.local}`).join(', ');
      const remap = taken.map((p) => `-p ${p.remote}:<FREE PORT>`).join(' ');
      throw new UserError(
        `${where} already ${taken.length === 1 ? 'accepts' : 'accept'} connections from another process, before ` +
          'the local command started: the pod keeps its traffic',
        `stop that process (\`ss -ltnp\` names it), or map a free local port: ${remap}`,
      );
    }

    child = await startLocalCommand({
      command: options.command,
      args: options.args,
      env: childEnv.env,
      cwd: options.cwd,
      pipeOutput: reporter.capturesChildOutput,
      onOutput: (stream, text) => reporter.emit({ type: 'output', stream, text }),
    });
    dropStartupSignals();
    const running = child;
    const info: SessionInfo = {
      target: options.target ?? 'targetless',
      namespace: target?.namespace ?? s.namespace,
      pod: target?.podName,
      node: target?.nodeName,
      container: target?.container.name,
      agent: { name: s.agent.name, reused: s.agent.reused, version: s.hello.agentVersion },
      webhooks: target?.webhooks,
      answerWithinMs: target?.webhooks ? answerDeadlineMs(target.webhooks) : undefined,
      ports: ports.map(
        (p): PortState => ({
          remotePort: p.remote,
          localPort: p.local,
          mode: options.mode,
          filter: describeFilter(options.httpFilter),
        }),
      ),
      ...(target?.extension
        ? {
            extension: {
              kind: target.extension.kind,
              name: target.extension.name,
              service: `${target.extension.service.namespace}/${target.extension.service.name}`,
              pods: 1,
              available: target.extension.available,
              stealsNodeConnections: stealProbes,
            },
          }
        : {}),
    };
    if (info.answerWithinMs && !s.hello.features.includes(FEATURES.answerFallback))
      warn(
        reporter,
        `agent ${s.hello.agentVersion} does not hand unanswered webhook requests to the pod: ` +
          'a paused local command makes them time out (use the agent image of this devop version)',
      );
    const traffic = new TrafficControl(s, info, { ...options, stealProbes }, reporter);
    s.onRetarget?.((change) => traffic.retarget(change));

    const tunnelLost = new Promise<Error>((resolve) =>
      s.tunnel.once('close', (err) => resolve(err ?? new Error('closed'))),
    );
    const stoppedFromOutside = new Promise<string>((resolve) => s.onStopped?.(resolve));
    const started = startTraffic(ports, traffic, options, reporter, running);
    const outcome = await Promise.race([
      running.exited.then((exit) => ({ kind: 'exit' as const, exit })),
      tunnelLost.then((err) => ({ kind: 'tunnel' as const, err })),
      stoppedFromOutside.then((reason) => ({
        kind: 'failed' as const,
        err: new UserError(`this session was stopped: ${reason}`, 'the pod serves its own traffic; run devop again'),
      })),
      started.then(
        () => new Promise<never>(() => undefined),
        (err: unknown) => ({ kind: 'failed' as const, err }),
      ),
    ]);
    if (outcome.kind === 'exit') {
      // A start-up step still waiting (listen) reports how it failed first: the exit line then follows its cause.
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([started.catch(() => undefined), new Promise((r) => (timer = setTimeout(r, STEP_SETTLE_MS)))]);
      clearTimeout(timer);
      reporter.emit({ type: 'exit', code: outcome.exit.code, signal: outcome.exit.signal });
      await traffic.release();
      return outcome.exit.exitCode;
    }
    const err =
      outcome.kind === 'tunnel'
        ? new UserError(
            `the tunnel to the agent closed: ${outcome.err.message}`,
            'the pod serves its own traffic again; run devop again (check the agent pod and the API server)',
          )
        : outcome.err;
    const exit = await running.stop('SIGTERM');
    reporter.emit({ type: 'exit', code: exit.code, signal: exit.signal });
    await traffic.release();
    throw err;
  } finally {
    dropStartupSignals();
    if (child) await child.stop('SIGTERM').catch(() => undefined);
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
    await session?.close('devop exec ended').catch(() => undefined);
    if (replacement) await replacement.restoreStep();
  }
}

/** Waits for each port's local listener, then subscribes it; says why when the command never listens. */
async function startTraffic(
  ports: PortMapping[],
  traffic: TrafficControl,
  options: ExecServiceOptions,
  reporter: Reporter,
  child: LocalCommand,
): Promise<void> {
  if (ports.length === 0) {
    const why = options.replace
      ? options.mode === 'steal'
        ? 'no ports to steal (the container declares none; pass -p REMOTE[:LOCAL])'
        : "replaced without --steal: the copy gets no Service traffic; env, files and outgoing are the copy's"
      : options.target && options.target !== 'targetless'
        ? 'no ports to steal or mirror (the container declares none; pass -p REMOTE[:LOCAL]): only the env is applied'
        : 'targetless: no incoming traffic; outgoing connections go through the cluster';
    info(reporter, why);
    traffic.markReady();
    return;
  }
  const list = ports.map((p) => `:${p.local}`).join(', ');
  const verb = options.mode === 'steal' ? 'stealing' : 'mirroring';
  await step(reporter, 'listen', `waiting for the local command to listen on ${list}`, async () => {
    const results = await Promise.all(
      ports.map((p) =>
        waitForListen(p.local, {
          timeoutMs: options.startupTimeoutMs ?? SESSION_DEFAULTS.startupTimeoutMs,
          stopped: child.exited,
        }),
      ),
    );
    let missing = ports.filter((_, i) => !results[i]);
    if (missing.length > 0 && child.child.exitCode === null && child.child.signalCode === null) {
      const ms = options.startupTimeoutMs ?? SESSION_DEFAULTS.startupTimeoutMs;
      reporter.emit({
        type: 'error',
        step: 'listen',
        message:
          `the local command does not listen on 127.0.0.1:${missing.map((p) => p.local).join(', 127.0.0.1:')} ` +
          `after ${ms / 1000} s: the pod keeps serving port ${missing.map((p) => p.remote).join(', ')}`,
        hint:
          'make the command listen on that port on 127.0.0.1 (or 0.0.0.0), or map it with -p REMOTE:LOCAL; devop ' +
          'keeps waiting',
      });
      // Keep waiting in the background: a slow build may still bring the listener up.
      const late = await Promise.all(
        missing.map((p) => waitForListen(p.local, { timeoutMs: Number.MAX_SAFE_INTEGER, stopped: child.exited })),
      );
      missing = missing.filter((_, i) => !late[i]);
    }
    if (missing.length > 0) {
      // Only the command's end stops the wait. A step that did not succeed never gets a tick: it fails with the reason
      // (the session then ends with the command's exit code, see runExec).
      const { exitCode, signalCode } = child.child;
      const how = signalCode ? `was ended by ${signalCode}` : `exited with code ${exitCode}`;
      const where = missing.map((p) => `127.0.0.1:${p.local}`).join(', ');
      throw new UserError(`the local command ${how} before listening on ${where}`, 'see its output above');
    }
  });
  if (child.child.exitCode !== null || child.child.signalCode !== null) return;
  await step(
    reporter,
    'traffic',
    `${verb} ${ports.map((p) => `:${p.remote}`).join(', ')}`,
    () => traffic.subscribeAll(),
    () => describeFilter(options.httpFilter),
  );
  traffic.markReady();
}

/** The session's subscriptions: subscribe, switch mode/filter, pause/resume, release; bound to the reporter's keys. */
class TrafficControl {
  private readonly subscriptions = new Map<number, string>();
  private mode: StealMode;
  private filter: HttpFilter | undefined;
  private ready = false;
  private stopFollowing: (() => void) | undefined;

  constructor(
    private readonly session: Session,
    private readonly info: SessionInfo,
    private readonly options: ExecServiceOptions,
    private readonly reporter: Reporter,
  ) {
    this.mode = options.mode;
    this.filter = options.httpFilter;
  }

  async subscribeAll(): Promise<void> {
    await Promise.all(this.info.ports.map((p) => this.subscribe(p.remotePort)));
  }

  private async subscribe(port: number): Promise<void> {
    const { tunnel } = this.session;
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

function raceAbort<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}
