// Runs inside a pod's netns: accepts connections on a Unix socket (a path on the host filesystem, so reachable from the
// host's netns) and, per connection, dials 127.0.0.1:<port> in the pod netns — how the kubelet port-forwards.
// Protocol: the client writes "<port>\n"; the relay answers "OK\n" then pipes bytes, or "ERR <code> <message>\n" and
// closes.
import { createServer, connect } from 'node:net';
import { rmSync } from 'node:fs';

const socketPath = process.argv[2];
rmSync(socketPath, { force: true });

const server = createServer((client) => {
  let header = '';
  const onData = (chunk) => {
    header += chunk.toString('latin1');
    const nl = header.indexOf('\n');
    if (nl < 0) {
      if (header.length > 16) client.destroy();
      return;
    }
    client.off('data', onData);
    client.pause();
    const port = Number(header.slice(0, nl));
    const rest = Buffer.from(header.slice(nl + 1), 'latin1');
    const upstream = connect({ host: '127.0.0.1', port });
    upstream.setNoDelay(true);
    upstream.once('connect', () => {
      upstream.off('error', onConnectError);
      client.write('OK\n');
      if (rest.length) upstream.write(rest);
      client.pipe(upstream);
      upstream.pipe(client);
      client.resume();
      upstream.on('error', () => client.destroy());
      client.on('error', () => upstream.destroy());
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    const onConnectError = (err) => {
      client.end(`ERR ${err.code ?? 'ERROR'} ${err.message}\n`);
    };
    upstream.once('error', onConnectError);
  };
  client.on('data', onData);
  client.on('error', () => undefined); // the peer's close ends the relay
});
server.listen(socketPath, () => process.stdout.write('ready\n'));
// The kubelet holds our stdin: when it goes away (stopped or killed), so do we.
process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();
