// The load of bench/steal.ts, run inside the "client" netns (nsenter --net): requests at a fixed total rate, each slot
// taking the next path of a repeating pattern, so every path sees the same machine (`warmupCycles` of the pattern
// first, not counted, then `cycles`); prints one JSON line with each path's latencies (ms). A path named in `fresh`
// opens a new TCP connection per request (timed from before the connect); the others keep one connection alive. A
// process of its own, so the processes measured do not skew it.
//   node steal-load.mjs '<plan>'
//   plan: {"host","ports":{name:port},"fresh":[name],"pattern":[name],"cycles","warmupCycles","ratePerS"}
import { request, Agent } from 'node:http';
import { performance } from 'node:perf_hooks';

const plan = JSON.parse(process.argv[2]);
const names = Object.keys(plan.ports);
const keptAlive = () => new Agent({ keepAlive: true, maxSockets: 1 });
const agents = Object.fromEntries(names.map((n) => [n, plan.fresh.includes(n) ? false : keptAlive()]));
const samples = Object.fromEntries(names.map((n) => [n, []]));

function timedGet(name, path) {
  return new Promise((resolve, reject) => {
    const start = performance.now();
    const req = request({ host: plan.host, port: plan.ports[name], path, agent: agents[name] }, (res) => {
      res.resume();
      res.on('end', () => {
        if (res.statusCode === 200) resolve(performance.now() - start);
        else reject(new Error(`${name}: status ${res.statusCode}`));
      });
    });
    req.on('error', (err) => reject(new Error(`${name}: ${err.message}`)));
    req.end();
  });
}

const total = (plan.warmupCycles + plan.cycles) * plan.pattern.length;
const warm = plan.warmupCycles * plan.pattern.length;
const interval = 1000 / plan.ratePerS;
const started = performance.now();
const inflight = [];
for (let i = 0; i < total; i++) {
  const wait = started + i * interval - performance.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  const name = plan.pattern[i % plan.pattern.length];
  inflight.push(
    timedGet(name, `/${name}/${i}`).then((ms) => {
      if (i >= warm) samples[name].push(ms);
    }),
  );
}
await Promise.all(inflight);
for (const a of Object.values(agents)) if (a) a.destroy();
process.stdout.write(`${JSON.stringify(samples)}\n`);
