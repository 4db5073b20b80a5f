// The Echo validating webhook: refuses an Echo whose spec.replicas is above a limit. Served over HTTPS at /validate
// (AdmissionReview v1), with /healthz for the readiness probe; every replica serves it, leader or not.
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';

/** The limit the cluster's replicas apply unless told otherwise (--max-replicas / ECHO_MAX_REPLICAS). */
export const DEFAULT_MAX_REPLICAS = 5;
/** An AdmissionReview is small; a body beyond this is not one (kube-apiserver caps requests at 3 MiB). */
const MAX_REVIEW_BYTES = 3 * 1024 * 1024;

export interface AdmissionRequest {
  uid: string;
  operation?: string;
  name?: string;
  namespace?: string;
  object?: { spec?: { replicas?: unknown } } | null;
}

export interface AdmissionResponse {
  uid: string;
  allowed: boolean;
  status?: { code: number; reason: string; message: string };
}

/** The decision for one request: pure, so the unit tests need no server. */
export function reviewEcho(request: AdmissionRequest, maxReplicas: number): AdmissionResponse {
  const replicas = request.object?.spec?.replicas;
  if (typeof replicas === 'number' && replicas > maxReplicas)
    return {
      uid: request.uid,
      allowed: false,
      status: {
        code: 403,
        reason: 'Forbidden',
        message: `spec.replicas: ${replicas} is above the limit of ${maxReplicas}`,
      },
    };
  return { uid: request.uid, allowed: true };
}

export interface WebhookServerOptions {
  port: number;
  host?: string;
  tls: { key: string; cert: string };
  maxReplicas: number;
  log: (line: string) => void;
}

/** Starts the webhook server; resolves once it listens (port 0 picks a free port). */
export function startWebhookServer(options: WebhookServerOptions): Promise<Server> {
  const server = createServer({ key: options.tls.key, cert: options.tls.cert }, (req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/healthz') return res.end('ok');
    if (req.method !== 'POST' || path !== '/validate') {
      res.statusCode = 404;
      return res.end();
    }
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_REVIEW_BYTES) req.destroy();
      else chunks.push(c);
    });
    req.on('end', () => {
      let review: { request?: AdmissionRequest };
      try {
        review = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        res.statusCode = 400; // not JSON: not an AdmissionReview
        return res.end();
      }
      if (!review.request?.uid) {
        res.statusCode = 400;
        return res.end();
      }
      const response = reviewEcho(review.request, options.maxReplicas);
      const { namespace, name, operation } = review.request;
      options.log(
        `webhook: ${operation ?? '?'} ${namespace}/${name}: ` +
          (response.allowed ? 'allowed' : `denied (${response.status?.message})`),
      );
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response }));
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host ?? '0.0.0.0', () => {
      server.off('error', reject);
      const port = (server.address() as AddressInfo).port;
      // The pid: what a debugger (or `kill -STOP`) needs to stop this process and not the ones around it.
      options.log(`webhook listening on https://${options.host ?? '0.0.0.0'}:${port}/validate (pid ${process.pid})`);
      resolve(server);
    });
  });
}
