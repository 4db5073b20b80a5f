// dialPod's backend: one relay process per pod, started on first use inside the pod's netns, that connects to
// 127.0.0.1:<port> there (a process listening only on the pod's loopback is reachable, as through a real kubelet).
import { spawn, type ChildProcess } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const RELAY_SCRIPT = join(dirname(fileURLToPath(import.meta.url)), 'dial-relay.mjs');
/** A relay that has not said "ready" by then is broken (a loaded machine starts Node in well under this). */
const RELAY_START_DEADLINE_MS = 20_000;

export class PodDialError extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
  }
}

export class PodDialer {
  private relay: ChildProcess | undefined;
  private ready: Promise<void> | undefined;

  constructor(
    private readonly netns: string,
    readonly socketPath: string,
  ) {}

  private start(): Promise<void> {
    if (this.ready) return this.ready;
    this.ready = new Promise<void>((resolve, reject) => {
      const relay = spawn('ip', ['netns', 'exec', this.netns, process.execPath, RELAY_SCRIPT, this.socketPath], {
        stdio: ['pipe', 'pipe', 'pipe'],
        env: { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin' },
      });
      this.relay = relay;
      let stderr = '';
      const timer = setTimeout(
        () => reject(new Error(`dial relay in ${this.netns} did not start: ${stderr}`)),
        RELAY_START_DEADLINE_MS,
      );
      relay.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
      relay.stdout?.once('data', () => {
        clearTimeout(timer);
        resolve();
      });
      relay.once('exit', (code) => {
        clearTimeout(timer);
        this.ready = undefined;
        this.relay = undefined;
        reject(new Error(`dial relay in ${this.netns} exited (${code}): ${stderr}`));
      });
    });
    this.ready.catch(() => undefined); // each dial awaits ready and reports the failure itself
    return this.ready;
  }

  /** Resolves to a socket carrying the bytes of a TCP connection to 127.0.0.1:port inside the pod. */
  async dial(port: number): Promise<Socket> {
    await this.start();
    const socket = connect(this.socketPath);
    return new Promise<Socket>((resolve, reject) => {
      // The header is read in paused ('readable') mode so no byte after it is lost, and the socket is handed over with
      // no listener attached: the caller's first 'data' listener or pipe() starts the flow.
      let header = Buffer.alloc(0);
      const cleanup = () => {
        socket.off('readable', onReadable);
        socket.off('error', fail);
        socket.off('close', onClose);
      };
      const fail = (err: Error) => {
        cleanup();
        socket.destroy();
        reject(err);
      };
      const onClose = () =>
        fail(new PodDialError(`dial 127.0.0.1:${port} in pod: relay closed the connection`, 'ECONNRESET'));
      const onReadable = () => {
        for (let chunk = socket.read() as Buffer | null; chunk !== null; chunk = socket.read() as Buffer | null) {
          header = Buffer.concat([header, chunk]);
          const nl = header.indexOf(10);
          if (nl < 0) continue;
          cleanup();
          const line = header.subarray(0, nl).toString('latin1');
          const rest = header.subarray(nl + 1);
          if (line === 'OK') {
            if (rest.length) socket.unshift(rest);
            resolve(socket);
          } else {
            const [, code = 'ERROR', ...words] = line.split(' ');
            socket.destroy();
            reject(new PodDialError(`dial 127.0.0.1:${port} in pod: ${words.join(' ')}`, code));
          }
          return;
        }
      };
      socket.on('readable', onReadable);
      socket.once('error', fail);
      socket.once('close', onClose);
      socket.once('connect', () => socket.write(`${port}\n`));
    });
  }

  stop(): Promise<void> {
    const relay = this.relay;
    if (!relay || relay.exitCode !== null) return Promise.resolve();
    return new Promise((resolve) => {
      relay.once('exit', () => resolve());
      relay.kill('SIGKILL');
    });
  }
}
