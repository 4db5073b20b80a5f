// Streaming pod subresources as kubelet serves them: pods/log (chunked text), pods/exec and pods/attach (WebSocket
// v5/v4.channel.k8s.io, or a plain SPDY/3.1 upgrade: spdy-remote-command.ts) and pods/portforward (WebSocket
// v4.channel.k8s.io: per port a data and an error channel, each opened with the port; or SPDY, plain or tunnelled in a
// WebSocket as kubectl 1.31+ does: spdy-portforward.ts).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type Duplex, Readable } from 'node:stream';
import { WebSocket, WebSocketServer } from 'ws';
import { badRequest, invalid, toApiError, type K8sObject } from './errors.js';
import type { ExecProcess, NodeRuntime } from '../node-runtime.js';
import { SPDY_TUNNEL_PROTOCOL, serveSpdyPortForward } from './spdy-portforward.js';
import {
  REMOTE_COMMAND_PROTOCOLS,
  type RemoteCommand,
  type RemoteCommandOptions,
  serveSpdyRemoteCommand,
} from './spdy-remote-command.js';
import type { SpdyTransport } from './spdy.js';
import { queryFlag } from './selectors.js';

const EXEC_PROTOCOLS = ['v5.channel.k8s.io', 'v4.channel.k8s.io'];
const PORTFORWARD_PROTOCOLS = ['v4.channel.k8s.io', 'portforward.k8s.io', 'channel.k8s.io'];
/** The kubelet's port-forward protocol over SPDY (kubernetes pkg/kubelet/cri/streaming/portforward/httpstream.go). */
const SPDY_PORTFORWARD_PROTOCOLS = ['portforward.k8s.io'];
/** How long an ended SPDY connection waits for the client to close before it is cut (spdystream's closeTimeout). */
const SPDY_CLOSE_TIMEOUT_MS = 5000;
/** Stop reading from the pod while this much is queued towards the WebSocket client (bounded memory per tunnel). */
const HIGH_WATER = 1024 * 1024;
const CH_STDIN = 0;
const CH_STDOUT = 1;
const CH_STDERR = 2;
const CH_STATUS = 3;
const CH_RESIZE = 4;
const CH_CLOSE = 255;

function offeredProtocols(req: IncomingMessage): Set<string> {
  return new Set(
    String(req.headers['sec-websocket-protocol'] ?? '')
      .split(',')
      .map((s) => s.trim()),
  );
}

export function chooseProtocol(offered: Set<string>, supported: string[]): string | false {
  return supported.find((p) => offered.has(p)) ?? false;
}

/** Picks the container a pod subresource refers to, failing the way kube-apiserver does. */
export function pickContainer(pod: K8sObject, requested: string | null): string {
  const all = [
    ...(pod.spec?.containers ?? []),
    ...(pod.spec?.initContainers ?? []),
    ...(pod.spec?.ephemeralContainers ?? []),
  ].map((c: K8sObject) => c.name);
  if (requested) {
    if (!all.includes(requested)) throw badRequest(`container ${requested} is not valid for pod ${pod.metadata.name}`);
    return requested;
  }
  const main = (pod.spec?.containers ?? []).map((c: K8sObject) => c.name);
  const dflt = pod.metadata.annotations?.['kubectl.kubernetes.io/default-container'];
  if (dflt && main.includes(dflt)) return dflt;
  if (main.length === 1) return main[0];
  throw badRequest(
    `a container name must be specified for pod ${pod.metadata.name}, choose one of: [${main.join(' ')}]`,
  );
}

export async function serveLogs(
  runtime: NodeRuntime | undefined,
  pod: K8sObject,
  q: URLSearchParams,
  res: ServerResponse,
): Promise<void> {
  const container = pickContainer(pod, q.get('container'));
  if (!runtime)
    throw badRequest(
      `container "${container}" in pod "${pod.metadata.name}" is waiting to start: no node runs this pod`,
    );
  const tail = q.get('tailLines');
  const tailLines = tail !== null ? Number(tail) : undefined;
  // ValidatePodLogOptions (kubernetes pkg/registry/core/pod/rest/log.go): a negative tailLines is a 422.
  if (tailLines !== undefined && tailLines < 0) {
    const message = `Invalid value: ${tail}: must be greater than or equal to 0`;
    throw invalid('PodLogOptions', '', pod.metadata.name, [{ field: 'tailLines', message }]);
  }
  const stream = await runtime
    .logs({
      namespace: pod.metadata.namespace,
      pod: pod.metadata.name,
      container,
      // Booleans as the query parameter codec reads them: any value but 0 or false (python's follow=True too).
      follow: queryFlag(q, 'follow'),
      tailLines,
      previous: queryFlag(q, 'previous'),
      timestamps: queryFlag(q, 'timestamps'),
    })
    .catch((e) => {
      throw toApiError(e);
    });
  res.writeHead(200, {
    'Content-Type': 'text/plain',
    'Cache-Control': 'no-cache, private',
    'Transfer-Encoding': 'chunked',
  });
  res.flushHeaders();
  res.on('close', () => stream.destroy());
  stream.on('error', () => res.end());
  stream.pipe(res);
}

function frame(channel: number, data: Buffer): Buffer {
  return Buffer.concat([Buffer.from([channel]), data]);
}

function exitStatus(exitCode: number, signal: string | undefined, command: string[]): K8sObject {
  if (exitCode === 0 && !signal) return { metadata: {}, status: 'Success' };
  const code = exitCode || 137;
  return {
    metadata: {},
    status: 'Failure',
    message:
      `command terminated with non-zero exit code: error executing command [${command.join(' ')}], exit code ` +
      `${code}`,
    reason: 'NonZeroExitCode',
    details: { causes: [{ reason: 'ExitCode', message: String(code) }] },
  };
}

const flag = (q: URLSearchParams, name: string): boolean => q.get(name) === 'true' || q.get(name) === '1';

function remoteCommandOptions(q: URLSearchParams): RemoteCommandOptions {
  return {
    stdin: flag(q, 'stdin') || q.get('input') === '1',
    stdout: flag(q, 'stdout'),
    stderr: flag(q, 'stderr'),
    tty: flag(q, 'tty'),
  };
}

/** A container's output from now on, as an attached process: the stand-in's containers keep no stdin open. */
async function attachedOutput(rt: NodeRuntime, pod: K8sObject, container: string): Promise<ExecProcess> {
  const output = await rt
    .logs({ namespace: pod.metadata.namespace, pod: pod.metadata.name, container, follow: true, tailLines: 0 })
    .catch((e) => {
      throw toApiError(e);
    });
  const ended = new Promise<{ exitCode: number }>((resolve) => {
    output.on('close', () => resolve({ exitCode: 0 }));
    output.on('end', () => resolve({ exitCode: 0 }));
  });
  return {
    stdin: null,
    stdout: output,
    stderr: Readable.from([]),
    resize: () => undefined,
    wait: () => ended,
    kill: () => output.destroy(),
  };
}

/** What pods/exec runs (the command) or pods/attach shows (the container's output), and how each ends. */
function remoteCommand(
  runtime: () => NodeRuntime | undefined,
  sub: 'exec' | 'attach',
  pod: K8sObject,
  q: URLSearchParams,
): RemoteCommand {
  const command = q.getAll('command');
  const opts = remoteCommandOptions(q);
  return {
    async start() {
      const container = pickContainer(pod, q.get('container'));
      const rt = runtime();
      if (!rt)
        throw badRequest(
          `container "${container}" in pod "${pod.metadata.name}" is not running: no node runs this pod`,
        );
      if (sub === 'attach') {
        if (opts.stdin)
          throw badRequest(
            `the stand-in attaches to the output of container "${container}" only (its containers keep no stdin ` +
              `open): attach without -i, or run the command with kubectl exec -i`,
          );
        return attachedOutput(rt, pod, container);
      }
      if (command.length === 0) throw badRequest('you must specify at least 1 command');
      return rt.exec({
        namespace: pod.metadata.namespace,
        pod: pod.metadata.name,
        container,
        command,
        stdin: opts.stdin,
        tty: opts.tty,
      });
    },
    // An attach ends when the container's output does, with Success (kubelet's ServeAttach).
    outcome: (result) =>
      sub === 'attach' ? { metadata: {}, status: 'Success' } : exitStatus(result.exitCode, result.signal, command),
    failure: (e) => toApiError(e).toStatus(),
  };
}

/** A header's values, sent several times or comma-separated (httpstream.go commaSeparatedHeaderValues). */
function headerValues(req: IncomingMessage, name: string): string[] | undefined {
  const raw = req.headersDistinct[name];
  if (!raw) return undefined;
  return raw.flatMap((v) => v.split(',').map((p) => p.trim())).filter((p) => p !== '');
}

function refuse(socket: Duplex, code: number, reason: string, message: string, extra = ''): void {
  const body = `${message}\n`;
  socket.end(
    `HTTP/1.1 ${code} ${reason}\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\n` +
      `${extra}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
}

/**
 * A plain SPDY/3.1 upgrade as the kubelet answers it: the X-Stream-Protocol-Version handshake (apimachinery
 * pkg/util/httpstream/httpstream.go Handshake: the first of the client's protocols the server has), then 101 with
 * `Connection: Upgrade`, `Upgrade: SPDY/3.1` (httpstream/spdy/upgrade.go UpgradeResponse), then SPDY frames.
 */
function upgradeSpdy(
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  serverProtocols: string[],
  serve: (transport: SpdyTransport, protocol: string) => { receive(chunk: Buffer): void; close(): void },
): void {
  const header = 'X-Stream-Protocol-Version';
  const connection = String(req.headers.connection ?? '').toLowerCase();
  const offered = headerValues(req, header.toLowerCase());
  const protocol = offered?.find((p) => serverProtocols.includes(p));
  if (!connection.includes('upgrade') || !/spdy\/3\.1/i.test(String(req.headers.upgrade ?? ''))) {
    refuse(socket, 400, 'Bad Request', 'unable to upgrade: missing upgrade headers in request');
  } else if (!offered) {
    const count = Object.keys(req.headers).length;
    refuse(
      socket,
      400,
      'Bad Request',
      `unable to upgrade: header ${header} does not exist in request with ${count} headers`,
    );
  } else if (!protocol) {
    refuse(
      socket,
      403,
      'Forbidden',
      `unable to upgrade: unable to negotiate protocol: client supports [${offered.join(' ')}], server accepts ` +
        `[${serverProtocols.join(' ')}]`,
      serverProtocols.map((p) => `X-Accepted-Stream-Protocol-Versions: ${p}\r\n`).join(''),
    );
  } else {
    serveUpgraded(socket, head, protocol, serve);
  }
}

function serveUpgraded(
  socket: Duplex,
  head: Buffer,
  protocol: string,
  serve: (transport: SpdyTransport, protocol: string) => { receive(chunk: Buffer): void; close(): void },
): void {
  const header = 'X-Stream-Protocol-Version';
  socket.write(
    `HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n${header}: ${protocol}\r\n\r\n`,
  );
  let cut: NodeJS.Timeout | undefined;
  const served = serve(
    {
      write: (frame, done) => void socket.write(frame, done && (() => done())),
      isOpen: () => !socket.destroyed && socket.writable,
      end: () => {
        if (cut) return;
        socket.end();
        cut = setTimeout(() => socket.destroy(), SPDY_CLOSE_TIMEOUT_MS);
        cut.unref();
      },
    },
    protocol,
  );
  socket.on('data', (chunk: Buffer) => served.receive(chunk));
  socket.on('error', () => socket.destroy()); // a broken connection ends like a closed one
  socket.on('close', () => {
    clearTimeout(cut);
    served.close();
  });
  if (head.length > 0) served.receive(head);
}

export interface StreamServer {
  upgradeRemoteCommand(
    sub: 'exec' | 'attach',
    req: IncomingMessage,
    socket: Duplex,
    head: Buffer,
    pod: K8sObject,
    q: URLSearchParams,
  ): void;
  upgradePortForward(req: IncomingMessage, socket: Duplex, head: Buffer, pod: K8sObject, q: URLSearchParams): void;
  dropPortForwards(): void;
  closeAll(): void;
}

export function createStreamServer(runtime: () => NodeRuntime | undefined): StreamServer {
  const execWss = new WebSocketServer({
    noServer: true,
    perMessageDeflate: false,
    handleProtocols: (p) => chooseProtocol(p, EXEC_PROTOCOLS),
  });
  const pfWss = new WebSocketServer({
    noServer: true,
    perMessageDeflate: false,
    handleProtocols: (p) => chooseProtocol(p, PORTFORWARD_PROTOCOLS),
  });
  // (it names the real subprotocol in its answer: see upgradePortForward)
  const spdyWss = new WebSocketServer({
    noServer: true,
    perMessageDeflate: false,
    handleProtocols: () => SPDY_TUNNEL_PROTOCOL,
  });
  // Open WebSockets and plain SPDY connections, to cut them (a test's dropPortForwards, the server's close).
  type Open = { terminate(): void };
  const portForwards = new Set<Open>();
  const all = new Set<Open>();
  const track = (ws: WebSocket, set?: Set<Open>) => {
    all.add(ws);
    set?.add(ws);
    ws.on('close', () => {
      all.delete(ws);
      set?.delete(ws);
    });
  };
  const trackSocket = (socket: Duplex, set?: Set<Open>) => {
    const open = { terminate: () => socket.destroy() };
    all.add(open);
    set?.add(open);
    socket.on('close', () => {
      all.delete(open);
      set?.delete(open);
    });
  };
  const dialer = (pod: K8sObject) => {
    const rt = runtime();
    return rt ? (port: number) => rt.dialPod(pod.metadata.namespace, pod.metadata.name, port) : undefined;
  };

  const runRemoteCommand = async (ws: WebSocket, command: RemoteCommand) => {
    const sendStatus = (status: K8sObject) => {
      if (ws.readyState === WebSocket.OPEN)
        ws.send(frame(CH_STATUS, Buffer.from(JSON.stringify(status))), () => ws.close(1000));
    };
    try {
      const proc = await command.start();
      const v5 = ws.protocol === 'v5.channel.k8s.io';
      ws.on('message', (data: Buffer) => {
        if (data.length === 0) return;
        const ch = data[0];
        const payload = data.subarray(1);
        if (ch === CH_STDIN) proc.stdin?.write(payload);
        else if (ch === CH_RESIZE) {
          try {
            const size = JSON.parse(payload.toString('utf8'));
            proc.resize(Number(size.Width ?? size.width), Number(size.Height ?? size.height));
          } catch {
            // A malformed resize message is ignored, as kubelet does.
          }
        } else if (ch === CH_CLOSE && v5 && payload[0] === CH_STDIN) proc.stdin?.end();
      });
      ws.on('close', () => proc.kill());
      proc.stdin?.on('error', () => undefined);
      const pump = (src: NodeJS.ReadableStream, ch: number) =>
        new Promise<void>((resolve) => {
          src.on('data', (d: Buffer) => {
            if (ws.readyState === WebSocket.OPEN) ws.send(frame(ch, Buffer.from(d)));
          });
          src.on('end', resolve);
          src.on('close', resolve);
          src.on('error', () => resolve());
        });
      const drained = Promise.all([pump(proc.stdout, CH_STDOUT), pump(proc.stderr, CH_STDERR)]);
      const result = await proc.wait();
      await Promise.race([drained, new Promise((r) => setTimeout(r, 2000))]);
      sendStatus(command.outcome(result));
    } catch (e) {
      sendStatus(command.failure(e));
    }
  };

  const runPortForward = (ws: WebSocket, pod: K8sObject, q: URLSearchParams) => {
    const ports = (q.getAll('ports').join(',') || '')
      .split(',')
      .filter((p) => p !== '')
      .map(Number);
    const rt = runtime();
    if (ports.length === 0 || ports.some((p) => !(p > 0 && p < 65536))) {
      ws.close(1011, 'invalid port');
      return;
    }
    let open = ports.length;
    const done = () => {
      if (--open === 0 && ws.readyState === WebSocket.OPEN) ws.close(1000);
    };
    const sockets: Duplex[] = [];
    ws.on('close', () => {
      for (const s of sockets) s.destroy();
    });
    ports.forEach((port, i) => {
      const dataCh = i * 2;
      const errCh = i * 2 + 1;
      const portBytes = Buffer.alloc(2);
      portBytes.writeUInt16LE(port, 0);
      ws.send(frame(dataCh, portBytes));
      ws.send(frame(errCh, portBytes));
      const fail = (msg: string) => {
        if (ws.readyState === WebSocket.OPEN)
          ws.send(
            frame(
              errCh,
              Buffer.from(`error forwarding port ${port} to pod ${pod.metadata.name}, uid ${pod.metadata.uid}: ${msg}`),
            ),
          );
        done();
      };
      if (!rt) {
        fail('no node runs this pod');
        return;
      }
      const pending: Buffer[] = [];
      let sock: Duplex | undefined;
      let waiting = false;
      ws.on('message', (data: Buffer) => {
        if (data.length === 0 || data[0] !== dataCh) return;
        const payload = Buffer.from(data.subarray(1));
        if (!sock) pending.push(payload);
        else if (!sock.write(payload) && !waiting) {
          // Messages already read from the socket still arrive after pause(): one drain listener is enough for all of
          // them.
          waiting = true;
          ws.pause();
          sock.once('drain', () => {
            waiting = false;
            ws.resume();
          });
        }
      });
      rt.dialPod(pod.metadata.namespace, pod.metadata.name, port).then(
        (s) => {
          sock = s;
          sockets.push(s);
          if (ws.readyState !== WebSocket.OPEN) return s.destroy();
          for (const p of pending.splice(0)) s.write(p);
          let queued = 0;
          s.on('data', (d: Buffer) => {
            queued += d.length;
            ws.send(frame(dataCh, d), () => {
              queued -= d.length;
              if (queued < HIGH_WATER && s.isPaused()) s.resume();
            });
            if (queued >= HIGH_WATER) s.pause();
          });
          s.on('error', (e) => fail(e.message));
          s.on('end', () => done());
        },
        (e: Error) => fail(e.message),
      );
    });
  };

  return {
    upgradeRemoteCommand(sub, req, socket, head, pod, q) {
      const command = remoteCommand(runtime, sub, pod, q);
      if (String(req.headers.upgrade ?? '').toLowerCase() !== 'websocket') {
        // kubectl up to 1.29 (or with KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false) asks for SPDY/3.1.
        const opts = remoteCommandOptions(q);
        // The kubelet's NewOptions (remotecommand/httpstream.go) refuses before the upgrade.
        if (!opts.stdin && !opts.stdout && !opts.stderr)
          throw badRequest('you must specify at least 1 of stdin, stdout, stderr');
        trackSocket(socket);
        upgradeSpdy(req, socket, head, REMOTE_COMMAND_PROTOCOLS, (transport, protocol) =>
          serveSpdyRemoteCommand(transport, protocol, opts, command),
        );
        return;
      }
      if (!chooseProtocol(offeredProtocols(req), EXEC_PROTOCOLS)) {
        socket.end(
          `HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\r\nthe stand-in serves pods/${sub} over ` +
            'WebSocket (v5.channel.k8s.io, v4.channel.k8s.io) or SPDY/3.1 only\n',
        );
        return;
      }
      execWss.handleUpgrade(req, socket, head, (ws) => {
        track(ws);
        void runRemoteCommand(ws, command);
      });
    },
    upgradePortForward(req, socket, head, pod, q) {
      if (String(req.headers.upgrade ?? '').toLowerCase() !== 'websocket') {
        // kubectl up to 1.30 (or with KUBECTL_PORT_FORWARD_WEBSOCKETS=false) asks for SPDY/3.1.
        trackSocket(socket, portForwards);
        upgradeSpdy(req, socket, head, SPDY_PORTFORWARD_PROTOCOLS, (transport) =>
          serveSpdyPortForward(transport, pod, dialer(pod)),
        );
        return;
      }
      if (offeredProtocols(req).has(SPDY_TUNNEL_PROTOCOL)) {
        // ws refuses a subprotocol with "/" in it (not an RFC 7230 token), which kube-apiserver accepts: it is offered
        // to ws under a token name, and the answer (spdyWss's handleProtocols) names the real one.
        req.headers['sec-websocket-protocol'] = 'spdy-portforward';
        spdyWss.handleUpgrade(req, socket, head, (ws) => {
          track(ws, portForwards);
          const served = serveSpdyPortForward(
            {
              write: (frame, done) => ws.send(frame, done && (() => done())),
              isOpen: () => ws.readyState === WebSocket.OPEN,
              end: () => ws.close(1000),
            },
            pod,
            dialer(pod),
          );
          ws.on('message', (data: Buffer) => served.receive(data));
          ws.on('close', () => served.close());
        });
        return;
      }
      pfWss.handleUpgrade(req, socket, head, (ws) => {
        track(ws, portForwards);
        runPortForward(ws, pod, q);
      });
    },
    dropPortForwards() {
      for (const ws of portForwards) ws.terminate();
    },
    closeAll() {
      for (const ws of all) ws.terminate();
      execWss.close();
      pfWss.close();
      spdyWss.close();
    },
  };
}
