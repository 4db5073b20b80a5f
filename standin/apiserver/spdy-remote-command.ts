// pods/exec and pods/attach over a plain SPDY/3.1 upgrade, as the kubelet serves them to kubectl up to 1.29
// (kubernetes pkg/kubelet/cri/streaming/remotecommand/httpstream.go): the client opens an error stream and one stream
// per stdin, stdout, stderr and (with a TTY) resize; the command starts once all of them are there; stdout and stderr
// end with a half-close; the error stream carries the outcome (v4: a Status JSON with the exit code; v1-v3: the
// message of a failure only); then GOAWAY.
import type { K8sObject } from './errors.js';
import type { ExecProcess } from '../node-runtime.js';
import { type SpdyTransport, spdySession } from './spdy.js';

/** The kubelet's remotecommand protocols, newest first (apimachinery pkg/util/remotecommand/constants.go). */
export const REMOTE_COMMAND_PROTOCOLS = [
  'v4.channel.k8s.io',
  'v3.channel.k8s.io',
  'v2.channel.k8s.io',
  'channel.k8s.io',
];
/** How long the kubelet waits for the client to open the streams it asked for (its streamCreationTimeout). */
const STREAM_CREATION_TIMEOUT_MS = 30_000;
/** How long the output may take to arrive after the command ended before the outcome is sent anyway. */
const DRAIN_MS = 2000;

export interface RemoteCommandOptions {
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
  tty: boolean;
}

export interface RemoteCommand {
  /** Starts the command (throws an ApiError to refuse). */
  start(): Promise<ExecProcess>;
  /** The Status of a command that ended. */
  outcome(result: { exitCode: number; signal?: string }): K8sObject;
  /** The Status of a command that could not start or failed. */
  failure(e: unknown): K8sObject;
}

type Role = 'error' | 'stdin' | 'stdout' | 'stderr' | 'resize';

export function serveSpdyRemoteCommand(
  transport: SpdyTransport,
  protocol: string,
  opts: RemoteCommandOptions,
  command: RemoteCommand,
): { receive(chunk: Buffer): void; close(): void } {
  const v4 = protocol === 'v4.channel.k8s.io';
  const resizes = opts.tty && (v4 || protocol === 'v3.channel.k8s.io');
  // The kubelet counts the streams from the request's options (httpstream.go createHTTPStreamStreams).
  const expected = 1 + Number(opts.stdin) + Number(opts.stdout) + Number(opts.stderr && !opts.tty) + Number(resizes);
  const streams = new Map<Role, number>();
  const roles = new Map<number, Role>();
  let proc: ExecProcess | undefined;
  let started = false;
  let closed = false;
  let stdinEnded = false;
  let resizeText = '';
  const earlyStdin: Buffer[] = [];

  const expired = setTimeout(() => {
    // The kubelet gives up without a word ("timed out waiting for client to create streams") and closes.
    if (!started) finish();
  }, STREAM_CREATION_TIMEOUT_MS);

  const session = spdySession(transport, {
    stream(id, headers) {
      const role = headers.get('streamtype') as Role;
      if (!['error', 'stdin', 'stdout', 'stderr', 'resize'].includes(role)) return;
      streams.set(role, id);
      roles.set(id, role);
      if (!started && streams.size >= expected) void run();
    },
    data(id, payload, fin) {
      const role = roles.get(id);
      if (role === 'stdin') {
        if (payload.length > 0) {
          if (proc?.stdin) proc.stdin.write(payload);
          else if (!proc) earlyStdin.push(Buffer.from(payload));
        }
        if (fin) {
          stdinEnded = true;
          proc?.stdin?.end();
        }
      } else if (role === 'resize') {
        resizeText += payload.toString('utf8');
        resize();
      }
    },
    reset() {
      // A reset stream only loses its own bytes; the command goes on, as with spdystream.
    },
    closed() {
      close();
    },
  });

  /** The client writes one JSON TerminalSize per line (Go's json.Encoder). */
  const resize = (): void => {
    let nl = resizeText.indexOf('\n');
    while (nl >= 0) {
      const line = resizeText.slice(0, nl);
      resizeText = resizeText.slice(nl + 1);
      try {
        const size = JSON.parse(line);
        proc?.resize(Number(size.Width), Number(size.Height));
      } catch {
        // A malformed size is skipped: the kubelet's decoder stops reading resizes, the command goes on.
      }
      nl = resizeText.indexOf('\n');
    }
  };

  const writeStatus = (status: K8sObject): void => {
    const id = streams.get('error');
    if (id === undefined) return;
    // v1-v3 carry a failure's message only (httpstream.go v1WriteStatusFunc), v4 the Status (v4WriteStatusFunc).
    if (v4) session.send(id, Buffer.from(JSON.stringify(status)));
    else if (status.status !== 'Success') session.send(id, Buffer.from(String(status.message ?? '')));
  };

  const finish = (): void => {
    clearTimeout(expired);
    for (const role of ['stdout', 'stderr', 'error'] as const) {
      const id = streams.get(role);
      if (id !== undefined) session.send(id, Buffer.alloc(0), true);
    }
    session.goAway();
  };

  const pump = (src: NodeJS.ReadableStream, role: 'stdout' | 'stderr'): Promise<void> =>
    new Promise((resolve) => {
      src.on('data', (d: Buffer) => {
        const id = streams.get(role);
        if (id !== undefined) session.send(id, Buffer.from(d));
      });
      src.on('end', resolve);
      src.on('close', resolve);
      src.on('error', () => resolve());
    });

  const run = async (): Promise<void> => {
    started = true;
    clearTimeout(expired);
    try {
      proc = await command.start();
      if (closed) return proc.kill();
      proc.stdin?.on('error', () => undefined);
      for (const chunk of earlyStdin.splice(0)) proc.stdin?.write(chunk);
      if (stdinEnded) proc.stdin?.end();
      resize();
      const drained = Promise.all([pump(proc.stdout, 'stdout'), pump(proc.stderr, 'stderr')]);
      const result = await proc.wait();
      await Promise.race([drained, new Promise((r) => setTimeout(r, DRAIN_MS))]);
      writeStatus(command.outcome(result));
    } catch (e) {
      writeStatus(command.failure(e));
    }
    finish();
  };

  const close = (): void => {
    closed = true;
    clearTimeout(expired);
    proc?.kill();
    session.close();
  };
  return { receive: (chunk) => session.receive(chunk), close };
}
