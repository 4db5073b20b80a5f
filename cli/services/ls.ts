// `devop ls`: what can be targeted in a namespace — deployments, statefulsets and pods — with ready counts and ports.
import type { V1Container, V1PodSpec } from '@kubernetes/client-node';
import { loadKubeConfig, type KubeAccessOptions } from '../kube/config.js';
import { isPodReady } from '../kube/target.js';
import { listWorkloads } from '../kube/workloads.js';

export interface LsOptions extends KubeAccessOptions {
  namespace?: string;
}

export interface LsEntry {
  /** What to pass to -t, e.g. deploy/echo. */
  target: string;
  kind: 'deployment' | 'statefulset' | 'pod';
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

/** Lists the namespace's targets; statefulsets are skipped when the cluster does not serve them. */
export async function listTargets(options: LsOptions): Promise<LsResult> {
  const loaded = loadKubeConfig(options);
  const namespace = options.namespace ?? loaded.namespace;
  const { deployments, statefulsets, pods } = await listWorkloads(loaded.kc, namespace);
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
  return { namespace, targets };
}

/** A plain table: TARGET READY PORTS CONTAINERS. */
export function formatLsTable(result: LsResult): string {
  if (result.targets.length === 0) return `no deployments, statefulsets or pods in namespace ${result.namespace}\n`;
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
