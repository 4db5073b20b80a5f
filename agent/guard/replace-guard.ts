// `agent guard`: the in-cluster guard of a `devop exec --replace` session. It watches the session's Lease and, once the
// Lease is gone or has not been renewed for its duration (devop was killed, or the laptop went offline), gives the
// workload its recorded replica count back, deletes the copy pod and the Lease, then deletes its own Job and exits.
// It talks to the API server with its service account over plain HTTPS (no client library: the agent bundle stays
// small).
import { readFileSync } from 'node:fs';
import { request } from 'node:https';
import { errorMessage } from '../../shared/errors.js';
import { GUARD_ENV, restorePatch, type ReplacedWorkload } from '../../shared/replace-contract.js';
import type { AgentLog } from '../log.js';

const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
/** How often the guard reads the Lease: the restore follows the expiry within this much. */
const POLL_MS = 1000;
/** Every API call is bounded; a slow one is retried at the next poll. */
const REQUEST_TIMEOUT_MS = 5000;
/** The Lease's own duration when it does not say (the CLI writes it). */
const DEFAULT_LEASE_SECONDS = 15;

interface ApiAnswer {
  status: number;
  body: unknown;
}

export interface GuardConfig {
  namespace: string;
  workloadPath: string;
  lease: string;
  holder: string;
  copyPod: string;
  job: string;
}

export function guardConfigFromEnv(env: NodeJS.ProcessEnv): GuardConfig {
  const read = (key: keyof typeof GUARD_ENV): string => {
    const value = env[GUARD_ENV[key]];
    if (!value) throw new Error(`${GUARD_ENV[key]} is not set (the CLI sets it in the guard Job)`);
    return value;
  };
  return {
    namespace: read('namespace'),
    workloadPath: read('workloadPath'),
    lease: read('lease'),
    holder: read('holder'),
    copyPod: read('copyPod'),
    job: read('job'),
  };
}

/** The in-cluster API server, from the service account and the KUBERNETES_SERVICE_* variables. */
function apiClient(env: NodeJS.ProcessEnv) {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = Number(env.KUBERNETES_SERVICE_PORT ?? 443);
  if (!host) throw new Error('KUBERNETES_SERVICE_HOST is not set: the guard runs in a pod');
  const ca = readFileSync(`${SA_DIR}/ca.crt`);
  return (method: string, path: string, body?: object, contentType = 'application/json'): Promise<ApiAnswer> =>
    new Promise((resolve, reject) => {
      // The token is read on each call: the kubelet rotates it.
      const token = readFileSync(`${SA_DIR}/token`, 'utf8').trim();
      const payload = body ? JSON.stringify(body) : undefined;
      const req = request(
        {
          host: host.includes(':') ? `[${host}]` : host,
          port,
          method,
          path,
          ca,
          timeout: REQUEST_TIMEOUT_MS,
          headers: {
            authorization: `Bearer ${token}`,
            accept: 'application/json',
            ...(payload ? { 'content-type': contentType, 'content-length': Buffer.byteLength(payload) } : {}),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            let parsed: unknown = text;
            try {
              parsed = JSON.parse(text);
            } catch {
              // not JSON (a proxy's error page): kept as text for the log
            }
            resolve({ status: res.statusCode ?? 0, body: parsed });
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error(`${method} ${path} took over ${REQUEST_TIMEOUT_MS} ms`)));
      req.on('error', reject);
      req.end(payload);
    });
}

export type GuardApi = ReturnType<typeof apiClient>;
type Api = GuardApi;

interface LeaseView {
  spec?: { holderIdentity?: string; renewTime?: string; leaseDurationSeconds?: number };
  metadata?: { resourceVersion?: string };
}

/**
 * Follows the Lease by the guard's own clock (as client-go's leader election does): the holder's clock may differ from
 * the cluster's, so the guard does not compare renewTime with its time, only notices when renewTime last changed.
 */
export class LeaseWatch {
  private lastRenew: string | undefined;
  private changedAt: number;

  constructor(now: number) {
    this.changedAt = now;
  }

  /** 'live' while the holder renews; 'ended' once the Lease is gone, held by another, or not renewed in time. */
  observe(lease: LeaseView | undefined, holder: string, now: number): 'live' | 'ended' {
    if (!lease || lease.spec?.holderIdentity !== holder) return 'ended';
    const renew = lease.spec?.renewTime ?? '';
    if (renew !== this.lastRenew) {
      this.lastRenew = renew;
      this.changedAt = now;
    }
    const duration = (lease.spec?.leaseDurationSeconds ?? DEFAULT_LEASE_SECONDS) * 1000;
    return now - this.changedAt > duration ? 'ended' : 'live';
  }
}

async function readLease(api: Api, config: GuardConfig): Promise<LeaseView | undefined> {
  const path = `/apis/coordination.k8s.io/v1/namespaces/${config.namespace}/leases/${config.lease}`;
  const answer = await api('GET', path);
  if (answer.status === 404) return undefined;
  if (answer.status !== 200) throw new Error(`GET lease ${config.lease}: HTTP ${answer.status}`);
  return answer.body as LeaseView;
}

/** Gives the workload its count back (when this session's annotation is still there), deletes the copy and Lease. */
export async function restoreWorkload(api: Api, config: GuardConfig, log: AgentLog): Promise<void> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const read = await api('GET', config.workloadPath);
    if (read.status === 404) break;
    if (read.status !== 200) throw new Error(`GET ${config.workloadPath}: HTTP ${read.status}`);
    const patch = restorePatch(read.body as ReplacedWorkload, config.holder);
    if (!patch) break;
    const answer = await api('PATCH', config.workloadPath, patch, 'application/merge-patch+json');
    if (answer.status === 409) continue; // changed between read and patch: read again
    if (answer.status !== 200) throw new Error(`PATCH ${config.workloadPath}: HTTP ${answer.status}`);
    log.info('workload restored', { workload: config.workloadPath, replicas: (patch as { spec: object }).spec });
    break;
  }
  const copy = await api('DELETE', `/api/v1/namespaces/${config.namespace}/pods/${config.copyPod}`);
  if (copy.status !== 404 && copy.status >= 300) throw new Error(`DELETE pod ${config.copyPod}: HTTP ${copy.status}`);
  const lease = await readLease(api, config);
  if (lease?.spec?.holderIdentity === config.holder) {
    const path = `/apis/coordination.k8s.io/v1/namespaces/${config.namespace}/leases/${config.lease}`;
    await api('DELETE', path, { preconditions: { resourceVersion: lease.metadata?.resourceVersion } });
  }
}

/** The guard's last call: its Job goes, and with it (garbage collection) its pod, ServiceAccount, Role and binding. */
export async function deleteOwnJob(api: Api, config: GuardConfig): Promise<void> {
  await api('DELETE', `/apis/batch/v1/namespaces/${config.namespace}/jobs/${config.job}?propagationPolicy=Background`);
}

/** Runs the guard until the session has ended and everything is restored; resolves when its Job is being deleted. */
export async function runReplaceGuard(env: NodeJS.ProcessEnv, log: AgentLog): Promise<void> {
  const config = guardConfigFromEnv(env);
  const api = apiClient(env);
  const watch = new LeaseWatch(Date.now());
  log.info('guard watching', { lease: config.lease, holder: config.holder, workload: config.workloadPath });
  for (;;) {
    try {
      if (watch.observe(await readLease(api, config), config.holder, Date.now()) === 'ended') {
        log.info('session ended: restoring', { lease: config.lease });
        await restoreWorkload(api, config, log);
        await deleteOwnJob(api, config);
        return;
      }
    } catch (err) {
      // The API server may be unreachable for a while: the guard keeps trying, it is what restores the workload.
      log.warn('guard poll failed', { error: errorMessage(err) });
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}
