// `devop sessions` and `devop sessions stop ID`: the sessions that hold devop's Leases (unfiltered steals, --replace),
// read from the cluster; stopping one deletes its Leases, which its devop notices at its next renewal, and ends.
import { hostname } from 'node:os';
import { CoordinationV1Api, type V1Lease } from '@kubernetes/client-node';
import { UserError } from '../../shared/errors.js';
import { loadKubeConfig, type KubeAccessOptions } from '../kube/config.js';
import { apiErrorCode, mapApiError } from '../kube/errors.js';
import {
  LEASE_ANNOTATIONS,
  LEASE_LABEL,
  LEASE_RENEW_MS,
  leaseHolder,
  leaseVerdict,
  parseHolderIdentity,
} from '../kube/steal-lease.js';
import { processAlive } from '../process/session-dirs.js';
import { clientIdentity } from '../session/connect.js';

export interface SessionsOptions extends KubeAccessOptions {
  namespace?: string;
  allNamespaces?: boolean;
}

export interface SessionRow {
  /** The run part of the Leases' holderIdentity (user@host#run): what `devop sessions stop` takes. */
  id: string;
  namespace: string;
  /** What is locked, e.g. deployment/echo. */
  target: string;
  /** Stolen ports (none for --replace, which takes the whole workload). */
  ports: number[];
  mode: string;
  /** user@host of the devop that holds the Leases. */
  holder: string;
  since: string;
  /** live: renewed in time; expired: its devop is gone (`devop clean` removes it). */
  state: 'live' | 'expired';
  /** The holder's devop process, when it runs on this machine. */
  pid?: number;
  leases: string[];
}

export interface Me {
  user: string;
  host: string;
  isAlive: (pid: number) => boolean;
}

/** Groups devop's Leases by holder into sessions, oldest first. Pure. */
export function sessionsOfLeases(leases: V1Lease[], me: Me, now: number): SessionRow[] {
  const byHolder = new Map<string, SessionRow>();
  for (const lease of leases) {
    const identity = lease.spec?.holderIdentity;
    if (!identity) continue; // released: no session holds it
    const namespace = lease.metadata?.namespace ?? '';
    const { user, host, run } = parseHolderIdentity(identity);
    const annotations = lease.metadata?.annotations ?? {};
    const key = `${namespace}/${identity}`;
    const row = byHolder.get(key) ?? {
      id: run || identity,
      namespace,
      target: annotations[LEASE_ANNOTATIONS.workload] ?? '',
      ports: [],
      mode: lease.metadata?.labels?.[LEASE_LABEL] ?? '',
      holder: `${user}@${host}`,
      since: leaseHolder(lease).since,
      state: 'expired' as const,
      leases: [],
    };
    const port = Number(annotations[LEASE_ANNOTATIONS.port]);
    if (Number.isInteger(port) && port > 0 && !row.ports.includes(port)) row.ports.push(port);
    if (leaseVerdict(lease, '', now) === 'held') row.state = 'live';
    const since = leaseHolder(lease).since;
    if (since < row.since) row.since = since;
    const pid = Number(annotations[LEASE_ANNOTATIONS.pid]);
    if (host === me.host && Number.isInteger(pid) && pid > 0 && me.isAlive(pid)) row.pid = pid;
    row.leases.push(lease.metadata?.name ?? '');
    byHolder.set(key, row);
  }
  return [...byHolder.values()]
    .map((row) => ({ ...row, ports: [...row.ports].sort((a, b) => a - b) }))
    .sort((a, b) => a.since.localeCompare(b.since));
}

export function formatSessionsTable(rows: SessionRow[]): string {
  if (rows.length === 0) return 'no devop session holds a Lease here\n';
  const header = ['ID', 'NAMESPACE', 'TARGET', 'PORTS', 'MODE', 'HOLDER', 'SINCE', 'STATE', 'PID'];
  const cells = rows.map((r) => [
    r.id,
    r.namespace,
    r.target,
    r.ports.join(',') || '-',
    r.mode,
    r.holder,
    r.since,
    r.state,
    r.pid === undefined ? '-' : String(r.pid),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  return [header, ...cells]
    .map(
      (line) =>
        `${line
          .map((c, i) => c.padEnd(widths[i]))
          .join('  ')
          .trimEnd()}\n`,
    )
    .join('');
}

function describe(row: SessionRow): string {
  const ports = row.ports.length > 0 ? ` port ${row.ports.join(',')}` : '';
  return `${row.mode} of ${row.target}${ports} in ${row.namespace}, since ${row.since}`;
}

/**
 * Whether `me` may stop the session without asking by name: its own (same user@host), or one whose devop is gone.
 * Another user's live session touches their traffic: only with --force (and the cluster's RBAC decides then). Pure.
 */
export function stopRefusal(row: SessionRow, me: Pick<Me, 'user' | 'host'>, force: boolean): UserError | undefined {
  if (force || row.holder === `${me.user}@${me.host}` || row.state === 'expired') return undefined;
  return new UserError(
    `session ${row.id} is ${row.holder}'s (${describe(row)}), not yours`,
    `to stop another user's session, ask for it by name: \`devop sessions stop ${row.id} --force\` (it needs the ` +
      `RBAC to delete Leases in namespace ${row.namespace}); or ask ${row.holder} to stop it`,
  );
}

function me(): Me {
  const { user } = clientIdentity();
  return { user, host: hostname(), isAlive: processAlive };
}

async function readSessions(
  api: CoordinationV1Api,
  options: SessionsOptions,
  namespace: string,
): Promise<SessionRow[]> {
  const labelSelector = LEASE_LABEL;
  const where = options.allNamespaces ? undefined : namespace;
  try {
    const list = where
      ? await api.listNamespacedLease({ namespace: where, labelSelector })
      : await api.listLeaseForAllNamespaces({ labelSelector });
    return sessionsOfLeases(list.items, me(), Date.now());
  } catch (err) {
    throw mapApiError(err, {
      action: 'list the Leases of devop sessions',
      verb: 'list',
      resource: 'leases.coordination.k8s.io',
      namespace: where,
    });
  }
}

export async function listSessions(options: SessionsOptions): Promise<SessionRow[]> {
  const loaded = loadKubeConfig(options);
  const api = loaded.kc.makeApiClient(CoordinationV1Api);
  return readSessions(api, options, options.namespace ?? loaded.namespace);
}

export interface StopResult {
  session: SessionRow;
  /** Whether its devop, on this machine, ended before stop returned. */
  ended?: boolean;
}

/** How long `stop` waits for a local devop to end: it notices the deletion at its next renewal, then restores. */
const LOCAL_END_WAIT_MS = 3 * LEASE_RENEW_MS;

export async function stopSession(options: SessionsOptions & { id: string; force?: boolean }): Promise<StopResult> {
  const loaded = loadKubeConfig(options);
  const api = loaded.kc.makeApiClient(CoordinationV1Api);
  const namespace = options.namespace ?? loaded.namespace;
  const rows = await readSessions(api, options, namespace);
  const matching = rows.filter((r) => r.id === options.id);
  if (matching.length === 0)
    throw new UserError(
      `no devop session ${options.id} ${options.allNamespaces ? 'in any namespace' : `in namespace ${namespace}`}`,
      '`devop sessions` lists them (-A: every namespace)',
    );
  if (matching.length > 1)
    throw new UserError(
      `session ID ${options.id} names sessions in several namespaces`,
      `pass -n with one of: ${matching.map((r) => r.namespace).join(', ')}`,
    );
  const row = matching[0];
  const refusal = stopRefusal(row, me(), options.force === true);
  if (refusal) throw refusal;
  for (const name of row.leases) await deleteLease(api, row, name);
  if (row.pid === undefined) return { session: row };
  const pid = row.pid;
  const deadline = Date.now() + LOCAL_END_WAIT_MS;
  while (Date.now() < deadline && processAlive(pid)) await new Promise((r) => setTimeout(r, 100));
  return { session: row, ended: !processAlive(pid) };
}

/** Deletes one Lease of the session, if it still belongs to it (a renewal in between: read again). */
async function deleteLease(api: CoordinationV1Api, row: SessionRow, name: string): Promise<void> {
  const { namespace } = row;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const lease = await api.readNamespacedLease({ name, namespace });
      if (parseHolderIdentity(lease.spec?.holderIdentity ?? '').run !== row.id) return; // another session's now
      await api.deleteNamespacedLease({
        name,
        namespace,
        body: { preconditions: { resourceVersion: lease.metadata?.resourceVersion } },
      });
      return;
    } catch (err) {
      const code = apiErrorCode(err);
      if (code === 404) return;
      if (code === 409) continue;
      if (code === 403)
        throw new UserError(
          `forbidden: cannot delete Lease ${name} of session ${row.id}, which is ${row.holder}'s (${describe(row)})`,
          'ask a cluster admin for RBAC permission to "delete" on "leases.coordination.k8s.io" in namespace ' +
            `${namespace}, or ask ${row.holder} to stop it`,
        );
      throw mapApiError(err, {
        action: `stop session ${row.id}`,
        verb: 'delete',
        resource: 'leases.coordination.k8s.io',
        namespace,
        name,
      });
    }
  }
  throw new UserError(
    `Lease ${name} of session ${row.id} kept changing while devop tried to delete it`,
    `run \`devop sessions stop ${row.id}\` again`,
  );
}

export function formatStopResult(result: StopResult): string {
  const { session: row } = result;
  const head = `stopped session ${row.id} (${row.holder}: ${describe(row)})`;
  if (row.state === 'expired') return `${head}: its devop was already gone; its Leases are removed\n`;
  if (result.ended === true) return `${head}: its devop (PID ${row.pid}) restored the pod's traffic and ended\n`;
  if (result.ended === false) return `${head}: its Leases are deleted; its devop (PID ${row.pid}) has not ended yet\n`;
  return (
    `${head}: its Leases are deleted; its devop ends within ${LEASE_RENEW_MS / 1000} s, at its next renewal, ` +
    'and the pod serves its own traffic again\n'
  );
}
