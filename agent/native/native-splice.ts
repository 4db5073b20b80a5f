// The agent's native data path: devop-splice (agent/native/splice.c), one long-lived child beside devop-nft. A session
// that lists native-splice opens a second port of its port-forward to it and joins with its session id; a port whose
// traffic all goes to one such session's whole steal is then redirected to a listener of devop-splice, which moves the
// bytes in C (agent/incoming/ports.ts decides, per port). The agent keeps everything else: handshakes, filters,
// mirrors, fallbacks, several sessions on a port — and, when devop-splice is gone, the whole steals too.
import { dirname, join } from 'node:path';
import { LineChild } from './line-child.js';
import type { AgentLog } from '../log.js';

/** The program: next to the agent's bundle (/opt/devop in the image, dist/ in a checkout). */
export function spliceProgram(): string {
  return join(dirname(process.argv[1] ?? '.'), 'devop-splice');
}

/** devop-splice says it listens within this (it starts in a millisecond; this is for a loaded node). */
const READY_TIMEOUT_MS = 10_000;

export interface NativeEvents {
  /** A session's native connection joined (true) or ended (false). */
  joined(token: string, joined: boolean): void;
  /** devop-splice ended by itself: its listeners and connections are gone. */
  gone(why: string): void;
}

export class NativeSplice {
  private nextKey = 0;

  private constructor(
    private readonly helper: LineChild,
    /** The port devop-splice listens on for sessions' native connections (127.0.0.1 in the pod's netns). */
    readonly port: number,
  ) {}

  /** Starts devop-splice on `port` (0: it picks one) and waits for it to listen; throws why it could not. */
  static async start(
    port: number,
    log: AgentLog,
    events: NativeEvents,
    command: readonly string[] = [spliceProgram(), String(port)],
  ): Promise<NativeSplice> {
    let ready: ((line: string) => void) | undefined;
    const first = new Promise<string>((resolve) => (ready = resolve));
    const helper = LineChild.start(command, {
      name: 'devop-splice',
      log,
      stderr: 'inherit',
      goneMeans: 'whole steals go through the agent',
      onEvent: (line) => {
        const [word, token] = line.split(' ');
        if (word === 'ready') ready?.(line);
        else if ((word === 'joined' || word === 'left') && token) events.joined(token, word === 'joined');
        else log.warn('devop-splice said something unexpected', { line });
      },
      onGone: (why) => {
        ready?.(`gone ${why}`);
        events.gone(why);
      },
    });
    let timer: NodeJS.Timeout | undefined;
    const line = await Promise.race([
      first,
      new Promise<string>((resolve) => {
        timer = setTimeout(() => resolve(`silent for ${READY_TIMEOUT_MS / 1000} s`), READY_TIMEOUT_MS);
      }),
    ]).finally(() => clearTimeout(timer));
    ready = undefined;
    const listening = /^ready (\d+)$/.exec(line);
    if (!listening) {
      helper.close();
      throw new Error(`devop-splice did not start: ${line}`);
    }
    return new NativeSplice(helper, Number(listening[1]));
  }

  /** devop-splice's process id (the owned table outlives it: agent/native/nft-owned.ts). */
  get pid(): number | undefined {
    return this.helper.pid;
  }

  get alive(): boolean {
    return this.helper.alive;
  }

  /** A session (by its id) may join from now on. */
  session(token: string): Promise<void> {
    return this.helper.request(`session ${token}`).then(() => undefined);
  }

  /** The session is over: its native connection closes, its streams are reset. */
  end(token: string): Promise<void> {
    return this.helper.request(`end ${token}`).then(() => undefined);
  }

  /**
   * A listener whose connections go whole to the session's native connection, as stolen connections of `port` under
   * subscription `subscriptionId`. Resolves with its key (for unsteal) and its port (for the redirect rule).
   */
  async steal(token: string, port: number, subscriptionId: string): Promise<{ key: string; listenerPort: number }> {
    const key = `${port}.${++this.nextKey}`;
    const answer = await this.helper.request(`steal ${key} ${token} ${port} ${subscriptionId}`);
    return { key, listenerPort: Number(answer) };
  }

  /** Closes the listener once what is queued on it is taken; its connections go on until they end. */
  unsteal(key: string): Promise<void> {
    return this.helper.request(`unsteal ${key}`).then(() => undefined);
  }

  /** The steal ended: its listener and the connections it took close (as the agent closes its own listener's). */
  drop(key: string): Promise<void> {
    return this.helper.request(`drop ${key}`).then(() => undefined);
  }

  /**
   * Ends devop-splice (the agent's end): its connections close with it. Resolves once it has exited, or after
   * `waitMs`: the agent's shutdown waits for it so those connections end while their redirect's NAT still applies.
   */
  close(waitMs = 0): Promise<void> {
    return this.helper.close(waitMs);
  }
}
