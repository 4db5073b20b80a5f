// A container's logger, as containerd's shim runs one (`ctr run --log-uri binary://…?<log file>`): fd 3 is the
// container's stdout, fd 4 its stderr, and closing fd 5 tells the shim to start the container. Each line goes to the
// log file in the CRI format kubelet reads (`<RFC3339Nano> <stream> <F|P> <text>`). The shim owns the pipes from the
// container's start to its end, so nothing the container writes before it exits is lost.
import { closeSync, openSync, writeSync } from 'node:fs';
import { Socket } from 'node:net';

// The shim sends SIGTERM once it has closed its ends of the pipes: what is still in them is written first.
process.on('SIGTERM', () => undefined);

const log = openSync(process.argv[2], 'a');

function timestamp() {
  return new Date().toISOString().replace(/\.(\d{3})Z$/, '.$1000000Z');
}

let open = 0;
for (const [fd, stream] of [
  [3, 'stdout'],
  [4, 'stderr'],
]) {
  open++;
  let partial = '';
  const pipe = new Socket({ fd, readable: true, writable: false });
  pipe.setEncoding('utf8');
  pipe.on('data', (text) => {
    const lines = (partial + text).split('\n');
    partial = lines.pop() ?? '';
    if (lines.length) writeSync(log, lines.map((line) => `${timestamp()} ${stream} F ${line}\n`).join(''));
  });
  pipe.on('error', () => undefined); // 'close' follows and ends this stream's log
  pipe.on('close', () => {
    // A last line without a newline is kept, marked partial, as kubelet keeps it.
    if (partial) writeSync(log, `${timestamp()} ${stream} P ${partial}\n`);
    if (--open === 0) {
      closeSync(log);
      process.exit(0);
    }
  });
}
closeSync(5);
