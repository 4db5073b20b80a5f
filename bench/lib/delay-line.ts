// A user-space delay line for the tunnel benchmark (this kernel has no sch_netem): a TCP relay that holds every chunk
// for a fixed delay in each direction, in order, without limiting bandwidth — a long fat path with an RTT of twice the
// delay. One process serves every route of a run, so the paths compared go through the same line.
//   node delay-line.mjs <delay ms> <target port>...   prints {"ports":[<listen port per target>]} on stdout
import net from 'node:net';

/**
 * Bytes held per direction of one connection before the line stops reading (64 MiB): far above what 1 GiB/s puts in
 * 10 ms, so it never limits the bandwidth measured, and still a bound if the far side stops reading.
 */
const MAX_IN_FLIGHT = 64 * 1024 * 1024;

interface Held {
  due: number;
  chunk: Buffer | null; // null: the sender half-closed
}

/** Moves `from`'s bytes to `to`, each one `delayMs` after it was read; keeps the order and the half-close. */
function delayOneWay(from: net.Socket, to: net.Socket, delayMs: number): void {
  const queue: Held[] = [];
  let head = 0;
  let held = 0;
  let timer: NodeJS.Timeout | null = null;
  let waitingForDrain = false;

  const release = (): void => {
    timer = null;
    if (waitingForDrain || to.destroyed) return;
    const now = performance.now();
    to.cork();
    while (head < queue.length && queue[head].due <= now) {
      const { chunk } = queue[head++];
      if (chunk === null) {
        to.end();
        break;
      }
      held -= chunk.length;
      if (!to.write(chunk)) waitingForDrain = true;
      if (waitingForDrain) break;
    }
    to.uncork();
    if (head > 1024 && head * 2 > queue.length) {
      queue.splice(0, head);
      head = 0;
    }
    if (held < MAX_IN_FLIGHT && from.isPaused()) from.resume();
    schedule();
  };
  const schedule = (): void => {
    if (timer !== null || waitingForDrain || head >= queue.length) return;
    timer = setTimeout(release, Math.max(0, queue[head].due - performance.now()));
  };
  to.on('drain', () => {
    waitingForDrain = false;
    release();
  });
  from.on('data', (chunk: Buffer) => {
    queue.push({ due: performance.now() + delayMs, chunk });
    held += chunk.length;
    if (held >= MAX_IN_FLIGHT) from.pause();
    schedule();
  });
  from.on('end', () => {
    queue.push({ due: performance.now() + delayMs, chunk: null });
    schedule();
  });
}

function main(): void {
  const [delayArg, ...targets] = process.argv.slice(2);
  const delayMs = Number(delayArg);
  const ports: number[] = [];
  let listening = 0;
  for (const [i, target] of targets.entries()) {
    const server = net.createServer({ allowHalfOpen: true, noDelay: true }, (client) => {
      const upstream = net.connect({ host: '127.0.0.1', port: Number(target), allowHalfOpen: true, noDelay: true });
      const teardown = (): void => {
        client.destroy();
        upstream.destroy();
      };
      // Only on an error: each side's END travels through the line behind its bytes and ends the other side in turn.
      client.on('error', teardown);
      upstream.on('error', teardown);
      delayOneWay(client, upstream, delayMs);
      delayOneWay(upstream, client, delayMs);
    });
    server.listen(0, '127.0.0.1', () => {
      ports[i] = (server.address() as net.AddressInfo).port;
      if (++listening === targets.length) process.stdout.write(`${JSON.stringify({ ports })}\n`);
    });
  }
  // The benchmark ends this process by closing our stdin.
  process.stdin.resume();
  process.stdin.on('end', () => process.exit(0));
}

main();
