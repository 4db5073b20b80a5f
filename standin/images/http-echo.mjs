// The devop.test/http-echo image: answers every request with JSON naming the pod and echoing the request ($PORT, 8080).
import { createServer } from 'node:http';
import { hostname } from 'node:os';

const port = Number(process.env.PORT || 8080);
const pod = process.env.POD_NAME || process.env.HOSTNAME || hostname();

const server = createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    // One log line per request: tests see who called (kubelet probes come from the node IP, as kube-probe).
    console.log(`${req.method} ${req.url} from ${req.socket.remoteAddress} ${req.headers['user-agent'] ?? '-'}`);
    const body = JSON.stringify({
      pod,
      method: req.method,
      path: req.url,
      headers: req.headers,
      body: Buffer.concat(chunks).toString('utf8'),
      remoteAddress: req.socket.remoteAddress,
    });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
});
server.listen(port, process.env.LISTEN_HOST || '0.0.0.0', () => {
  console.log(`http-echo ${pod} listening on ${port}`);
});
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    console.log(`http-echo ${pod} got ${sig}`);
    server.close();
    process.exit(0);
  });
}
