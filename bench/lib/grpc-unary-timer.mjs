// bench:grpc's client, run in a client pod's network namespace: unary calls of devop.test.Echo/Unary (grpc-echo's
// JSON codec) over one channel per path, one call at a time, the paths interleaved so that a busy moment hits all
// alike. argv[2]: {"paths": {"<name>": {"target": "ip:port", "metadata": {…}}}, "cycles": n, "warmup": n}; prints one
// JSON line: per path its calls' milliseconds, sorted, and who answered the last call.
import * as grpc from '@grpc/grpc-js';

const { paths, cycles, warmup } = JSON.parse(process.argv[2]);
const serialize = (value) => Buffer.from(JSON.stringify(value));
const deserialize = (bytes) => JSON.parse(bytes.toString('utf8'));
const UNARY = '/devop.test.Echo/Unary';

const clients = Object.fromEntries(
  Object.entries(paths).map(([name, { target }]) => [name, new grpc.Client(target, grpc.credentials.createInsecure())]),
);
const metadataOf = Object.fromEntries(
  Object.entries(paths).map(([name, { metadata = {} }]) => {
    const md = new grpc.Metadata();
    for (const [k, v] of Object.entries(metadata)) md.set(k, v);
    return [name, md];
  }),
);

function call(name) {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    clients[name].makeUnaryRequest(UNARY, serialize, deserialize, { text: 'x' }, metadataOf[name], (err, answer) =>
      err ? reject(new Error(`${name}: ${err.message}`)) : resolve({ ms: performance.now() - t0, from: answer.from }),
    );
  });
}

const times = Object.fromEntries(Object.keys(paths).map((name) => [name, []]));
const from = {};
for (let i = 0; i < warmup + cycles; i++)
  for (const name of Object.keys(paths)) {
    const r = await call(name);
    if (i >= warmup) times[name].push(r.ms);
    from[name] = r.from;
  }
for (const c of Object.values(clients)) c.close();
for (const list of Object.values(times)) list.sort((a, b) => a - b);
process.stdout.write(`${JSON.stringify({ times, from })}\n`);
