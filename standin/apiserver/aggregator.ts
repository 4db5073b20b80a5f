// APIService aggregation: requests under /apis/<group>/<version> of an APIService backed by a Service are proxied over
// TLS to a ready endpoint of that Service with the caller's identity in X-Remote-User/-Group/-Extra-*, as
// kube-apiserver does, from the API server's advertised address; a status loop keeps each APIService's Available
// condition current.
import { request as httpsRequest } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ApiError, type K8sObject } from './errors.js';
import type { Identity } from './auth.js';
import type { AggregatedGroup } from './discovery.js';
import { nowTime, type Objects } from './objects.js';
import { serviceEndpoint, type ServiceEndpoint, type ServiceEndpointError } from './service-endpoint.js';

const APISERVICES = 'apiregistration.k8s.io/apiservices';
/** Re-check cadence while every APIService is available (kube-aggregator resyncs every 30 s)… */
const RESYNC_MS = 30_000;
/** …and while one is not (a failed check is retried soon, as the aggregator's rate-limited requeue does). */
const RETRY_MS = 1000;
const PROXY_TIMEOUT_MS = 30_000;
/** How long the availability check and the OpenAPI index wait for an APIService's server. */
const PROBE_TIMEOUT_MS = 1500;

interface Backend extends ServiceEndpoint {
  ca?: string;
  insecure: boolean;
  /** The front-proxy client certificate and key the aggregator presents (kube-apiserver's --proxy-client-cert-file). */
  cert?: string;
  key?: string;
}

export class Aggregator {
  private timer?: NodeJS.Timeout;
  private unsubscribe?: () => void;
  private stopped = false;

  constructor(
    private readonly objects: Objects,
    private readonly clientCert?: { cert: string; key: string },
  ) {}

  private remoteServices(): K8sObject[] {
    return this.objects.store.list(APISERVICES).filter((a) => a.spec?.service && a.spec?.group && a.spec?.version);
  }

  groups(): AggregatedGroup[] {
    return this.remoteServices().map((a) => ({ group: a.spec.group, version: a.spec.version }));
  }

  handles(group: string, version: string): boolean {
    return this.remoteServices().some((a) => a.spec.group === group && a.spec.version === version);
  }

  /** A ready endpoint (pod IP and target port) of the APIService's Service. */
  backend(apiService: K8sObject): Backend | ServiceEndpointError {
    const ref = apiService.spec.service;
    const ep = serviceEndpoint(this.objects, {
      namespace: ref.namespace,
      name: ref.name,
      port: Number(ref.port ?? 443),
    });
    if ('error' in ep) return ep;
    const ca = apiService.spec.caBundle ? Buffer.from(apiService.spec.caBundle, 'base64').toString('utf8') : undefined;
    return { ...ep, ca, insecure: Boolean(apiService.spec.insecureSkipTLSVerify), ...this.clientCert };
  }

  /** Proxies a request for /apis/<group>/<version>/…, or for another path of the APIService serving `gv`. */
  proxy(req: IncomingMessage, res: ServerResponse, id: Identity, gv?: AggregatedGroup): void {
    const url = new URL(req.url ?? '/', 'https://stand-in');
    const [, , pathGroup, pathVersion] = url.pathname.split('/');
    const { group, version } = gv ?? { group: pathGroup, version: pathVersion };
    const apiService = this.remoteServices().find((a) => a.spec.group === group && a.spec.version === version);
    if (!apiService) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    const b = this.backend(apiService);
    if ('error' in b) throw new ApiError(503, 'ServiceUnavailable', `${b.error}`);
    // The caller's own X-Remote-* never reach the server: they are replaced by its identity, extras included
    // (client-go transport/round_trippers.go SetAuthProxyHeaders; X-Remote-Uid is sent only with the alpha
    // RemoteRequestHeaderUID gate).
    const headers: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(req.headers)) {
      if (v === undefined || ['authorization', 'host', 'connection'].includes(k)) continue;
      if (['x-remote-user', 'x-remote-uid', 'x-remote-group'].includes(k) || k.startsWith('x-remote-extra-')) continue;
      headers[k] = v;
    }
    headers['x-remote-user'] = id.name;
    headers['x-remote-group'] = id.groups;
    for (const [key, values] of Object.entries(id.extra ?? {}))
      headers[`x-remote-extra-${headerKeyEscape(key)}`] = values;
    headers['x-forwarded-for'] = req.socket.remoteAddress ?? '127.0.0.1';
    const out = httpsRequest(
      {
        host: b.host,
        port: b.port,
        localAddress: b.localAddress,
        method: req.method,
        path: req.url,
        headers,
        ca: b.ca,
        rejectUnauthorized: !b.insecure,
        cert: b.cert,
        key: b.key,
        servername: undefined,
        timeout: PROXY_TIMEOUT_MS,
      },
      (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      },
    );
    out.on('timeout', () => out.destroy(new Error('timeout')));
    out.on('error', (e) => {
      if (res.headersSent) return res.end();
      const body = JSON.stringify(
        new ApiError(503, 'ServiceUnavailable', `error trying to reach service: ${e.message}`).toStatus(),
      );
      res.writeHead(503, { 'Content-Type': 'application/json' });
      res.end(body);
    });
    req.pipe(out);
  }

  /**
   * The /openapi/v3 entries each APIService's server publishes for its own group-version, merged into the API server's
   * index as kube-aggregator does (pkg/controllers/openapiv3/aggregator/aggregator.go); the documents they point at
   * are then proxied (proxy with the group-version). A server that does not answer within the probe's time is left out.
   */
  async openapiV3Paths(): Promise<Record<string, K8sObject>> {
    const out: Record<string, K8sObject> = {};
    await Promise.all(
      this.remoteServices().map(async (a) => {
        const b = this.backend(a);
        if ('error' in b) return;
        const index = await this.getJson(b, '/openapi/v3');
        const key = `apis/${a.spec.group}/${a.spec.version}`;
        const entry = index?.paths?.[key];
        if (typeof entry?.serverRelativeURL === 'string') out[key] = { serverRelativeURL: entry.serverRelativeURL };
      }),
    );
    return out;
  }

  /**
   * The /openapi/v2 documents of the APIServices' servers, for the API server's own /openapi/v2 to merge in, as
   * kube-aggregator does (pkg/controllers/openapi/aggregator/aggregator.go); one that does not answer is left out.
   */
  async openapiV2Docs(): Promise<K8sObject[]> {
    const docs = await Promise.all(
      this.remoteServices().map(async (a) => {
        const b = this.backend(a);
        return 'error' in b ? undefined : this.getJson(b, '/openapi/v2');
      }),
    );
    return docs.filter((d): d is K8sObject => d !== undefined && typeof d === 'object' && d !== null);
  }

  private getJson(b: Backend, path: string): Promise<K8sObject | undefined> {
    return new Promise((resolve) => {
      const r = httpsRequest(
        {
          host: b.host,
          port: b.port,
          localAddress: b.localAddress,
          path,
          method: 'GET',
          ca: b.ca,
          rejectUnauthorized: !b.insecure,
          cert: b.cert,
          key: b.key,
          timeout: PROBE_TIMEOUT_MS,
          headers: { 'x-remote-user': 'system:kube-aggregator', accept: 'application/json' },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            try {
              resolve((res.statusCode ?? 500) < 300 ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : undefined);
            } catch {
              resolve(undefined); // not JSON: the server publishes no OpenAPI index
            }
          });
        },
      );
      r.on('timeout', () => r.destroy());
      r.on('error', () => resolve(undefined));
      r.end();
    });
  }

  private probe(b: Backend, group: string, version: string): Promise<boolean> {
    return new Promise((resolve) => {
      const r = httpsRequest(
        {
          host: b.host,
          port: b.port,
          localAddress: b.localAddress,
          path: `/apis/${group}/${version}`,
          method: 'GET',
          ca: b.ca,
          rejectUnauthorized: !b.insecure,
          cert: b.cert,
          key: b.key,
          timeout: PROBE_TIMEOUT_MS,
          headers: { 'x-remote-user': 'system:kube-aggregator', accept: 'application/json' },
        },
        (res) => {
          res.resume();
          resolve((res.statusCode ?? 500) < 300);
        },
      );
      r.on('timeout', () => r.destroy());
      r.on('error', () => resolve(false));
      r.end();
    });
  }

  /** Checks every APIService; true when all are available. */
  private async checkAll(): Promise<boolean> {
    let allAvailable = true;
    for (const a of this.objects.store.list(APISERVICES)) {
      let cond: { status: string; reason: string; message: string };
      if (!a.spec?.service)
        cond = { status: 'True', reason: 'Local', message: 'Local APIServices are always available' };
      else {
        const b = this.backend(a);
        if ('error' in b) cond = { status: 'False', reason: b.reason, message: b.error };
        else if (await this.probe(b, a.spec.group, a.spec.version))
          cond = { status: 'True', reason: 'Passed', message: 'all checks passed' };
        else
          cond = {
            status: 'False',
            reason: 'FailedDiscoveryCheck',
            message:
              `failing or missing response from ` +
              `https://${b.host}:${b.port}/apis/${a.spec.group}/${a.spec.version}`,
          };
      }
      if (cond.status !== 'True') allAvailable = false;
      const cur = this.objects.store.get(APISERVICES, '', a.metadata.name);
      if (!cur) continue;
      const old = (cur.status?.conditions ?? []).find((c: K8sObject) => c.type === 'Available');
      if (old && old.status === cond.status && old.reason === cond.reason) continue;
      const t = this.objects.type(APISERVICES);
      try {
        this.objects.update(
          t,
          '',
          a.metadata.name,
          { ...cur, status: { conditions: [{ type: 'Available', ...cond, lastTransitionTime: nowTime() }] } },
          { subresource: 'status' },
        );
      } catch {
        // A concurrent write wins; the next round re-checks.
      }
    }
    return allAvailable;
  }

  start(): void {
    let running = false;
    let again = false;
    const check = () => {
      if (this.stopped) return;
      if (running) {
        again = true;
        return;
      }
      running = true;
      if (this.timer) clearTimeout(this.timer);
      this.checkAll()
        .catch(() => false)
        .then((ok) => {
          running = false;
          if (this.stopped) return;
          if (again) {
            again = false;
            return check();
          }
          this.timer = setTimeout(check, ok ? RESYNC_MS : RETRY_MS);
          this.timer.unref();
        });
    };
    check();
    // Re-check at once when what availability depends on changes, as kube-apiserver's controller does.
    this.unsubscribe = this.objects.store.subscribe((ev) => {
      if (ev.key === APISERVICES || ev.key === '/endpoints' || ev.key === '/services') setImmediate(check);
    });
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.unsubscribe?.();
  }
}

/** round_trippers.go headerKeyEscape: bytes that are not an HTTP token character, and `%`, as %XX. */
function headerKeyEscape(key: string): string {
  let out = '';
  for (const b of Buffer.from(key, 'utf8')) {
    const c = String.fromCharCode(b);
    out += /^[!#$&'*+\-.^_`|~0-9A-Za-z]$/.test(c) ? c : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}
