// A native helper the agent drives over its stdin (devop-nft, devop-splice): one request line at a time, one answer
// line each — `ok [value]` or `error why` — in order. Any other line on its stdout is an event of the helper's own
// (devop-splice's `joined TOKEN`), handed to `onEvent`. Closing its stdin is how the agent ends it; its death is the
// agent's, too (each helper asks the kernel for its parent's death signal).
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync } from 'node:fs';
import { isAbsolute } from 'node:path';
import type { AgentLog } from '../log.js';

/**
 * How long one request may take. A helper answers in microseconds and bounds its own waits; one that does not answer
 * (stopped, or not the helper at all) is killed.
 */
const ANSWER_TIMEOUT_MS = 10_000;

export interface LineChildOptions {
  /** The helper's name in messages: devop-nft, devop-splice. */
  name: string;
  log: AgentLog;
  /** A line that is not an answer. */
  onEvent?: (line: string) => void;
  /** The helper ended without close(): `why` is its signal or exit code. */
  onGone?: (why: string) => void;
  /** What its end means for the agent, in the error later requests get. */
  goneMeans: string;
  /** Its stderr: the agent's own (its messages join the agent's log), or dropped. */
  stderr: 'inherit' | 'ignore';
}

export class LineChild {
  private buffer = '';
  private queue: Promise<unknown> = Promise.resolve();
  private waiting: { resolve: (line: string) => void; reject: (err: Error) => void } | undefined;
  private exitError: Error | undefined;
  private closed = false;
  /** Requests sent or waiting to be. */
  private inFlight = 0;

  private constructor(
    private readonly child: ChildProcessWithoutNullStreams,
    private readonly options: LineChildOptions,
  ) {
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      this.buffer += chunk;
      this.settle();
    });
    child.stdin.on('error', () => undefined); // the helper died: reported by 'exit'
    const gone = (why: string): void => {
      if (this.exitError) return;
      this.exitError = new Error(`${options.name} ended (${why}); ${options.goneMeans}`);
      this.waiting?.reject(this.exitError);
      this.waiting = undefined;
      if (!this.closed) options.onGone?.(why);
    };
    child.on('error', (err) => gone(err.message));
    child.on('exit', (code, signal) => gone(signal ?? `exit code ${code}`));
  }

  /** Starts the helper; `command` is its program and arguments (tests may wrap it, e.g. in `ip netns exec`). */
  static start(command: readonly string[], options: LineChildOptions): LineChild {
    const [file, ...args] = command;
    if (isAbsolute(file) && !existsSync(file)) throw new Error(`${options.name} (${file}) is missing`);
    const child = spawn(file, args, {
      stdio: ['pipe', 'pipe', options.stderr],
    }) as unknown as ChildProcessWithoutNullStreams;
    return new LineChild(child, options);
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get alive(): boolean {
    return this.exitError === undefined && !this.closed;
  }

  private settle(): void {
    for (let end = this.buffer.indexOf('\n'); end >= 0; end = this.buffer.indexOf('\n')) {
      const line = this.buffer.slice(0, end);
      const answer = line === 'ok' || line.startsWith('ok ') || line.startsWith('error ');
      if (answer && !this.waiting) return; // an answer waits for the request that is being written
      this.buffer = this.buffer.slice(end + 1);
      if (!answer) {
        this.options.onEvent?.(line);
        continue;
      }
      const { resolve } = this.waiting as NonNullable<typeof this.waiting>;
      this.waiting = undefined;
      resolve(line);
    }
  }

  /** Sends one request; resolves with what follows `ok` ('' when nothing), rejects with the helper's error. */
  request(line: string): Promise<string> {
    const { name, log } = this.options;
    const job = async (): Promise<string> => {
      if (this.exitError) throw this.exitError;
      if (this.closed) throw new Error(`${name} was closed`);
      let timer: NodeJS.Timeout | undefined;
      const answer = await new Promise<string>((resolve, reject) => {
        this.waiting = { resolve, reject };
        timer = setTimeout(() => {
          this.exitError = new Error(`${name} did not answer "${line}" within ${ANSWER_TIMEOUT_MS / 1000} s`);
          this.waiting = undefined;
          this.child.kill('SIGKILL');
          reject(this.exitError);
        }, ANSWER_TIMEOUT_MS);
        this.child.stdin.write(`${line}\n`);
        this.settle();
      }).finally(() => clearTimeout(timer));
      log.debug(name, { request: line, answer });
      if (answer === 'ok' || answer.startsWith('ok ')) return answer.slice(3);
      throw new Error(`${name}: ${answer.replace(/^error /, '')}`);
    };
    // With nothing in flight the line is written now, before the caller's next step: the agent tells devop-splice of a
    // session before its helloOk leaves, so the session's join can never arrive first.
    const next = this.inFlight === 0 ? job() : this.queue.then(job, job);
    this.inFlight++;
    const done = (): void => {
      this.inFlight--;
    };
    next.then(done, done);
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Closes the helper's stdin: it exits. Resolves when it has, or after `waitMs` (then it still runs: a busy node). */
  close(waitMs = 0): Promise<void> {
    this.closed = true;
    this.child.stdin.end();
    if (waitMs <= 0 || this.exitError || this.child.exitCode !== null || this.child.signalCode !== null)
      return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, waitMs);
      this.child.once('exit', () => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
