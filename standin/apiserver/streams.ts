// Streaming pod subresources as kubelet serves them: pods/log (chunked text), pods/exec (WebSocket
// v5/v4.channel.k8s.io) and pods/portforward (WebSocket v4.channel.k8s.io: per port a data and an error channel, each
// opened with the port; or kubectl 1.31+'s SPDY tunnelled in a WebSocket, spdy-portforward.ts). Plain SPDY upgrades get
// a Status.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocket, WebSocketServer } from 'ws';
import { ApiError, badRequest, toApiError, type K8sObject } from './errors.js';
import type { NodeRuntime } from '../node-runtime.js';
import { SPDY_TUNNEL_PROTOCOL, serveSpdyPortForward } from './spdy-portforward.js';

const EXEC_PROTOCOLS = ['v5.channel.k8s.io', 'v4.channel.k8s.io'];
const PORTFORWARD_PROTOCOLS = ['v4.channel.k8s.io', 'portforward.k8s.io', 'channel.k8s.io'];
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
  const stream = await runtime
    .logs({
      namespace: pod.metadata.namespace,
      pod: pod.metadata.name,
      container,
      follow: q.get('follow') === 'true',
      tailLines: tail !== null ? Number(tail) : undefined,
      previous: q.get('previous') === 'true',
      timestamps: q.get('timestamps') === 'true',
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

export interface StreamServer {
  upgradeExec(req: IncomingMessage, socket: Duplex, head: Buffer, pod: K8sObject, q: URLSearchParams): void;
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
  const portForwards = new Set<WebSocket>();
  const all = new Set<WebSocket>();
  const track = (ws: WebSocket, set?: Set<WebSocket>) => {
    all.add(ws);
    set?.add(ws);
    ws.on('close', () => {
      all.delete(ws);
      set?.delete(ws);
    });
  };

  const runExec = async (ws: WebSocket, pod: K8sObject, q: URLSearchParams) => {
    const command = q.getAll('command');
    const sendStatus = (status: K8sObject) => {
      if (ws.readyState === WebSocket.OPEN)
        ws.send(frame(CH_STATUS, Buffer.from(JSON.stringify(status))), () => ws.close(1000));
    };
    try {
      const container = pickContainer(pod, q.get('container'));
      const rt = runtime();
      if (!rt)
        throw new ApiError(
          400,
          'BadRequest',
          `container "${container}" in pod "${pod.metadata.name}" is not running: no node runs this pod`,
        );
      if (command.length === 0) throw badRequest('you must specify at least 1 command');
      const proc = await rt.exec({
        namespace: pod.metadata.namespace,
        pod: pod.metadata.name,
        container,
        command,
        stdin: q.get('stdin') === 'true' || q.get('input') === '1',
        tty: q.get('tty') === 'true',
      });
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
      const { exitCode, signal } = await proc.wait();
      await Promise.race([drained, new Promise((r) => setTimeout(r, 2000))]);
      sendStatus(exitStatus(exitCode, signal, command));
    } catch (e) {
      sendStatus(toApiError(e).toStatus());
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
    upgradeExec(req, socket, head, pod, q) {
      if (!chooseProtocol(offeredProtocols(req), EXEC_PROTOCOLS)) {
        socket.end(
          'HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\r\nthe stand-in serves pods/exec over WebSocket ' +
            '(v5.channel.k8s.io, v4.channel.k8s.io) only\n',
        );
        return;
      }
      execWss.handleUpgrade(req, socket, head, (ws) => {
        track(ws);
        void runExec(ws, pod, q);
      });
    },
    upgradePortForward(req, socket, head, pod, q) {
      if (String(req.headers.upgrade ?? '').toLowerCase() !== 'websocket') {
        // kubectl up to 1.30 (or with KUBECTL_PORT_FORWARD_WEBSOCKETS=false) asks for SPDY/3.1: kubectl prints this.
        throw badRequest(
          'the stand-in serves pods/portforward over WebSocket only, not SPDY: use kubectl 1.31+ (without ' +
            'KUBECTL_PORT_FORWARD_WEBSOCKETS=false), `devop port-forward`, or a WebSocket client (v4.channel.k8s.io)',
        );
      }
      if (offeredProtocols(req).has(SPDY_TUNNEL_PROTOCOL)) {
        // ws refuses a subprotocol with "/" in it (not an RFC 7230 token), which kube-apiserver accepts: it is offered
        // to ws under a token name, and the answer (spdyWss's handleProtocols) names the real one.
        req.headers['sec-websocket-protocol'] = 'spdy-portforward';
        spdyWss.handleUpgrade(req, socket, head, (ws) => {
          track(ws, portForwards);
          const rt = runtime();
          serveSpdyPortForward(
            ws,
            pod,
            rt ? (port) => rt.dialPod(pod.metadata.namespace, pod.metadata.name, port) : undefined,
          );
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
