// The RSS load of bench/steal.ts, run inside the "client" netns (nsenter --net): opens <count> keep-alive connections
// to host:port (100 at a time) and keeps each one carrying data: a small GET every <periodMs>, spread evenly over the
// period. Prints READY once every connection has had an answer, then "ANSWERS <n> CLOSED <m>" (so far) every second.
// SIGTERM ends it.
//   node held-connections.mjs <host> <port> <count> <periodMs>
import { connect } from 'node:net';

const [host, port, count, periodMs] = process.argv.slice(2);
const n = Number(count);
const period = Number(periodMs);
let answers = 0;
let answered = 0;
let closed = 0;

function hold(i) {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port: Number(port), noDelay: true });
    const ask = () => socket.write(`GET /held/${i} HTTP/1.1\r\nHost: pod\r\n\r\n`);
    let tail = '';
    let first = true;
    socket.on('connect', ask);
    socket.on('error', reject);
    socket.on('close', () => {
      closed++;
      reject(new Error(`connection ${i} closed`));
    });
    socket.on('data', (chunk) => {
      // Counts answers by their status line (the app's answers are small and have a Content-Length).
      const text = tail + chunk.toString('latin1');
      const got = text.split('HTTP/1.1 200').length - 1;
      tail = text.slice(-11); // shorter than a status line: never counted twice
      answers += got;
      if (got > 0 && first) {
        first = false;
        answered++;
        setTimeout(() => setInterval(ask, period), (i / n) * period);
        resolve();
      }
    });
  });
}

const failed = (err) => {
  process.stderr.write(`${err.message}\n`);
  process.exit(1);
};
for (let i = 0; i < n; i += 100) {
  await Promise.all(Array.from({ length: Math.min(100, n - i) }, (_, k) => hold(i + k))).catch(failed);
}
process.stdout.write(`READY ${answered}\n`);
setInterval(() => process.stdout.write(`ANSWERS ${answers} CLOSED ${closed}\n`), 1000);
process.on('SIGTERM', () => process.exit(0));
