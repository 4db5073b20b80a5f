// devop.test/grpc-echo: a gRPC server with the four call kinds (devop.test.Echo: Unary, ServerStream, ClientStream,
// Bidi) that names itself in every answer and in a trailer, and prints one JSON line per call and per cancellation on
// stdout; with the argument `client`, a gRPC client driven by JSON lines on stdin (one channel, so one HTTP/2
// connection, per target). `serve [NAME [PORT [HOST]]]`, or env NAME (default POD_NAME or the hostname), PORT (default
// 50051; a comma-separated list listens on each), LISTEN_HOST (default 0.0.0.0); GRPC_ECHO_QUIET=1 prints no line per
// call (benches). Build from the repository root:
// docker build -f standin/images/grpc-echo.Dockerfile .
import { hostname } from 'node:os';
import { createInterface } from 'node:readline';
import * as grpc from '@grpc/grpc-js';

const SERVICE = 'devop.test.Echo';
const serialize = (value) => Buffer.from(JSON.stringify(value));
const deserialize = (bytes) => JSON.parse(bytes.toString('utf8'));
/** Messages are JSON, not protobuf: the routing under test looks at HTTP/2 frames and gRPC metadata, never payloads. */
const method = (name, requestStream, responseStream) => ({
  path: `/${SERVICE}/${name}`,
  requestStream,
  responseStream,
  requestSerialize: serialize,
  requestDeserialize: deserialize,
  responseSerialize: serialize,
  responseDeserialize: deserialize,
});
const ECHO = {
  Unary: method('Unary', false, false),
  ServerStream: method('ServerStream', false, true),
  ClientStream: method('ClientStream', true, false),
  Bidi: method('Bidi', true, true),
};

const print = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function serve([argName, argPort, argHost]) {
  const name = argName || process.env.NAME || process.env.POD_NAME || hostname();
  const quiet = process.env.GRPC_ECHO_QUIET === '1';
  const trailer = () => {
    const md = new grpc.Metadata();
    md.set('x-served-by', name);
    return md;
  };
  /**
   * Logs the call, and its cancellation (a deadline or the client's cancel) when it comes before the answer: grpc-js
   * also emits 'cancelled' once a finished call's stream closes. Returns whether the call is still live.
   */
  const watch = (kind, call) => {
    let live = true;
    if (!quiet) print({ seen: 'call', method: kind, dev: call.metadata.get('x-dev')[0] ?? null, from: name });
    call.on('cancelled', () => {
      if (live) print({ seen: 'cancelled', method: kind, from: name });
      live = false;
    });
    return {
      live: () => live,
      answered: () => {
        live = false;
      },
    };
  };
  const server = new grpc.Server();
  server.addService(ECHO, {
    async Unary(call, callback) {
      const { live, answered } = watch('Unary', call);
      const { text = '', sleepMs = 0, fail } = call.request;
      await sleep(sleepMs);
      if (!live()) return;
      answered();
      if (fail) callback({ code: fail, details: `failed on ${name}`, metadata: trailer() });
      else callback(null, { from: name, text }, trailer());
    },
    async ServerStream(call) {
      const { live, answered } = watch('ServerStream', call);
      const { count = 3, sleepMs = 0 } = call.request;
      for (let i = 0; i < count && live(); i++) {
        call.write({ from: name, text: String(i) });
        await sleep(sleepMs);
      }
      if (!live()) return;
      answered();
      call.end(trailer());
    },
    ClientStream(call, callback) {
      const { answered } = watch('ClientStream', call);
      const texts = [];
      call.on('data', (m) => texts.push(m.text));
      call.on('end', () => {
        answered();
        callback(null, { from: name, text: texts.join(',') }, trailer());
      });
    },
    Bidi(call) {
      const { answered } = watch('Bidi', call);
      call.on('data', (m) => call.write({ from: name, text: m.text }));
      call.on('end', () => {
        answered();
        call.end(trailer());
      });
    },
  });
  const ports = String(argPort || process.env.PORT || 50051)
    .split(',')
    .map(Number);
  const host = argHost || process.env.LISTEN_HOST || '0.0.0.0';
  let bound = 0;
  for (const port of ports)
    server.bindAsync(`${host}:${port}`, grpc.ServerCredentials.createInsecure(), (err) => {
      if (err) {
        process.stderr.write(`grpc-echo: cannot listen on ${host}:${port}: ${err.message}\n`);
        process.exit(1);
      }
      if (++bound === ports.length) print({ seen: 'listening', port: ports.join(','), pid: process.pid, from: name });
    });
  process.on('SIGTERM', () => server.tryShutdown(() => process.exit(0)));
}

/**
 * One call per stdin line: {id, target, method, metadata?, requests, deadlineMs?, cancelAfterMs?}; one stdout line per
 * call when it ends: {id, responses, code, details, trailers}.
 */
function client() {
  const clients = new Map();
  let pending = 0;
  let ended = false;
  const closeWhenDone = () => {
    if (ended && pending === 0) for (const c of clients.values()) c.close();
  };
  const clientFor = (target) => {
    if (!clients.has(target)) clients.set(target, new grpc.Client(target, grpc.credentials.createInsecure()));
    return clients.get(target);
  };
  const run = (line) => {
    const { id, target, method: kind, metadata = {}, requests = [{}], deadlineMs, cancelAfterMs } = JSON.parse(line);
    const c = clientFor(target);
    const m = ECHO[kind];
    const md = new grpc.Metadata();
    for (const [k, v] of Object.entries(metadata)) md.set(k, v);
    const options = deadlineMs ? { deadline: Date.now() + deadlineMs } : {};
    const responses = [];
    pending++;
    const collect = (err, value) => {
      if (!err && value) responses.push(value);
    };
    const args = [m.path, m.requestSerialize, m.responseDeserialize];
    let call;
    if (kind === 'Unary') call = c.makeUnaryRequest(...args, requests[0], md, options, collect);
    else if (kind === 'ServerStream') call = c.makeServerStreamRequest(...args, requests[0], md, options);
    else if (kind === 'ClientStream') call = c.makeClientStreamRequest(...args, md, options, collect);
    else call = c.makeBidiStreamRequest(...args, md, options);
    call.on('data', (value) => responses.push(value));
    call.on('error', () => undefined); // the status below carries it
    call.on('status', (status) =>
      // After the unary callback, which grpc-js calls before it emits the status.
      setImmediate(() => {
        print({ id, responses, code: status.code, details: status.details, trailers: status.metadata.getMap() });
        pending--;
        closeWhenDone();
      }),
    );
    if (m.requestStream) {
      for (const r of requests) call.write(r);
      if (!cancelAfterMs) call.end();
    }
    if (cancelAfterMs) setTimeout(() => call.cancel(), cancelAfterMs);
  };
  createInterface({ input: process.stdin }).on('line', (line) => line.trim() && run(line));
  process.stdin.on('end', () => {
    ended = true;
    closeWhenDone();
  });
}

if (process.argv[2] === 'client') client();
else serve(process.argv[2] === 'serve' ? process.argv.slice(3) : []);
