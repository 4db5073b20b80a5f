// `devop ls`: what can be targeted in a namespace — deployments, statefulsets, pods, and the APIServices and webhook
// configurations its Services serve — with ready counts and ports.
import type { V1Container, V1Pod, V1PodSpec } from '@kubernetes/client-node';
import { loadKubeConfig, type KubeAccessOptions } from '../kube/config.js';
import { declaredPort, isPodReady } from '../kube/target.js';
import { listWorkloads } from '../kube/workloads.js';

export interface LsOptions extends KubeAccessOptions {
  namespace?: string;
}

export interface LsEntry {
  /** What to pass to -t, e.g. deploy/echo. */
  target: string;
  kind: 'deployment' | 'statefulset' | 'pod' | 'apiservice' | 'webhook';
  name: string;
  ready: number;
  total: number;
  ports: number[];
  containers: string[];
}

export interface LsResult {
  namespace: string;
  targets: LsEntry[];
}

function declaredPorts(containers: V1Container[] | undefined): number[] {
  return [...new Set((containers ?? []).flatMap((c) => (c.ports ?? []).map((p) => p.containerPort)))].sort(
    (a, b) => a - b,
  );
}

function names(spec: V1PodSpec | undefined): string[] {
  return (spec?.containers ?? []).map((c) => c.name);
}

/** The pods a Service selects (none without a selector: devop cannot find them either). */
function selected(pods: V1Pod[], selector: Record<string, string> | undefined): V1Pod[] {
  if (!selector || Object.keys(selector).length === 0) return [];
  return pods.filter((p) => Object.entries(selector).every(([k, v]) => p.metadata?.labels?.[k] === v));
}

/** The pod port a Service port leads to: its targetPort, a name looked up in the pods' containers. */
function targetPortOf(targetPort: number | string | undefined, port: number, pods: V1Pod[]): number[] {
  if (targetPort === undefined) return [port];
  if (typeof targetPort === 'number' || /^[0-9]+$/.test(targetPort)) return [Number(targetPort)];
  const declared = pods.map((p) => declaredPort(p, targetPort)).find(Boolean);
  return declared ? [declared.port] : [];
}

/** Lists the namespace's targets; statefulsets are skipped when the cluster does not serve them. */
export async function listTargets(options: LsOptions): Promise<LsResult> {
  const loaded = loadKubeConfig(options);
  const namespace = options.namespace ?? loaded.namespace;
  const { deployments, statefulsets, pods, extensions } = await listWorkloads(loaded.kc, namespace);
  const targets: LsEntry[] = [];
  for (const d of deployments) {
    const name = d.metadata?.name ?? '';
    targets.push({
      target: `deploy/${name}`,
      kind: 'deployment',
      name,
      ready: d.status?.readyReplicas ?? 0,
      total: d.spec?.replicas ?? 1,
      ports: declaredPorts(d.spec?.template.spec?.containers),
      containers: names(d.spec?.template.spec),
    });
  }
  for (const s of statefulsets) {
    const name = s.metadata?.name ?? '';
    targets.push({
      target: `sts/${name}`,
      kind: 'statefulset',
      name,
      ready: s.status?.readyReplicas ?? 0,
      total: s.spec?.replicas ?? 1,
      ports: declaredPorts(s.spec?.template.spec?.containers),
      containers: names(s.spec?.template.spec),
    });
  }
  for (const p of pods) {
    const name = p.metadata?.name ?? '';
    const statuses = p.status?.containerStatuses ?? [];
    targets.push({
      target: `pod/${name}`,
      kind: 'pod',
      name,
      ready: isPodReady(p)
        ? statuses.filter((s) => s.ready).length || names(p.spec).length
        : statuses.filter((s) => s.ready).length,
      total: names(p.spec).length,
      ports: declaredPorts(p.spec?.containers),
      containers: names(p.spec),
    });
  }
  for (const e of extensions) {
    // What a session takes over: every pod behind the Service, on the port the API server calls.
    const behind = selected(pods, e.service.spec?.selector);
    const port = e.service.spec?.ports?.find((p) => p.port === e.servicePort);
    const spec = behind[0]?.spec;
    targets.push({
      target: e.target,
      kind: e.kind,
      name: e.target.slice(e.target.indexOf('/') + 1),
      ready: behind.filter(isPodReady).length,
      total: behind.length,
      ports: port ? targetPortOf(port.targetPort, port.port, behind) : [],
      containers: names(spec),
    });
  }
  return { namespace, targets };
}

/** A plain table: TARGET READY PORTS CONTAINERS. */
export function formatLsTable(result: LsResult): string {
  if (result.targets.length === 0)
    return `no deployments, statefulsets, pods, APIServices or webhooks in namespace ${result.namespace}\n`;
  const rows = [
    ['TARGET', 'READY', 'PORTS', 'CONTAINERS'],
    ...result.targets.map((t) => [t.target, `${t.ready}/${t.total}`, t.ports.join(',') || '-', t.containers.join(',')]),
  ];
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return (
    rows.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]))).join('  ')).join('\n') +
    '\n'
  );
}
