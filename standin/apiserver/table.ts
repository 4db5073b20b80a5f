// meta.k8s.io/v1 Table output (what `kubectl get` asks for) with the columns kube-apiserver prints for common kinds.
import type { K8sObject } from './errors.js';
import type { ResourceType } from './resources.js';
import { storeKey } from './resources.js';

interface Column {
  name: string;
  type: string;
  format?: string;
  priority?: number;
  description?: string;
  cell: (o: K8sObject) => unknown;
}

/** kube's duration.HumanDuration, which every Age column uses. */
export function humanDuration(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  const m = Math.floor(s / 60);
  const h = Math.floor(m / 60);
  const d = Math.floor(h / 24);
  if (s < 120) return `${s}s`;
  if (m < 10) return s % 60 === 0 ? `${m}m` : `${m}m${s % 60}s`;
  if (m < 180) return `${m}m`;
  if (h < 8) return m % 60 === 0 ? `${h}h` : `${h}h${m % 60}m`;
  if (h < 48) return `${h}h`;
  if (h < 192) return h % 24 === 0 ? `${d}d` : `${d}d${h % 24}h`;
  if (d < 730) return `${d}d`;
  return `${Math.floor(d / 365)}y`;
}

const age = (o: K8sObject) =>
  o.metadata?.creationTimestamp ? humanDuration(Date.now() - Date.parse(o.metadata.creationTimestamp)) : '<unknown>';
const NAME: Column = {
  name: 'Name',
  type: 'string',
  format: 'name',
  description: 'Name must be unique within a namespace.',
  cell: (o) => o.metadata.name,
};
/** The `-o wide` columns of a workload with a pod template (kubectl's printers for Deployments and ReplicaSets). */
const POD_TEMPLATE_WIDE: Column[] = [
  {
    name: 'Containers',
    type: 'string',
    priority: 1,
    cell: (d) => (d.spec?.template?.spec?.containers ?? []).map((c: K8sObject) => c.name).join(','),
  },
  {
    name: 'Images',
    type: 'string',
    priority: 1,
    cell: (d) => (d.spec?.template?.spec?.containers ?? []).map((c: K8sObject) => c.image).join(','),
  },
  { name: 'Selector', type: 'string', priority: 1, cell: (d) => selectorText(d.spec?.selector) },
];

const AGE: Column = {
  name: 'Age',
  type: 'string',
  description: 'CreationTimestamp is a timestamp representing the server time when this object was created.',
  cell: age,
};
const none = (v: unknown) => (v === undefined || v === null || v === '' ? '<none>' : v);
const selectorText = (sel: K8sObject | undefined) =>
  none(
    Object.entries(sel?.matchLabels ?? sel ?? {})
      .map(([k, v]) => `${k}=${v}`)
      .join(','),
  );

function podStatus(p: K8sObject): string {
  let reason: string = p.status?.reason ?? p.status?.phase ?? 'Unknown';
  for (const cs of p.status?.containerStatuses ?? []) {
    if (cs.state?.waiting?.reason) reason = cs.state.waiting.reason;
    else if (cs.state?.terminated?.reason) reason = cs.state.terminated.reason;
    else if (cs.state?.terminated)
      reason = cs.state.terminated.signal
        ? `Signal:${cs.state.terminated.signal}`
        : `ExitCode:${cs.state.terminated.exitCode}`;
  }
  if (p.status?.phase === 'Running' && reason === 'Running') reason = 'Running';
  if (p.metadata.deletionTimestamp) reason = 'Terminating';
  return reason;
}

function servicePorts(s: K8sObject): string {
  return none(
    (s.spec?.ports ?? [])
      .map((p: K8sObject) => `${p.port}${p.nodePort ? `:${p.nodePort}` : ''}/${p.protocol ?? 'TCP'}`)
      .join(','),
  ) as string;
}

function jobStatus(j: K8sObject): string {
  const conds: K8sObject[] = j.status?.conditions ?? [];
  if (conds.some((c) => c.type === 'Complete' && c.status === 'True')) return 'Complete';
  if (conds.some((c) => c.type === 'Failed' && c.status === 'True')) return 'Failed';
  if (j.metadata.deletionTimestamp) return 'Terminating';
  return 'Running';
}

function columnsFor(t: ResourceType): Column[] {
  switch (storeKey(t)) {
    case '/pods':
      return [
        NAME,
        {
          name: 'Ready',
          type: 'string',
          description: 'The aggregate readiness state of this pod for accepting traffic.',
          cell: (p) => {
            const ready = (p.status?.containerStatuses ?? []).filter((c: K8sObject) => c.ready).length;
            return `${ready}/${(p.spec?.containers ?? []).length}`;
          },
        },
        {
          name: 'Status',
          type: 'string',
          description: 'The aggregate status of the containers in this pod.',
          cell: podStatus,
        },
        {
          name: 'Restarts',
          type: 'string',
          description: 'The number of times the containers in this pod have been restarted.',
          cell: (p) =>
            String(
              (p.status?.containerStatuses ?? []).reduce((n: number, c: K8sObject) => n + (c.restartCount ?? 0), 0),
            ),
        },
        AGE,
        {
          name: 'IP',
          type: 'string',
          priority: 1,
          description: 'IP address allocated to the pod.',
          cell: (p) => none(p.status?.podIP),
        },
        {
          name: 'Node',
          type: 'string',
          priority: 1,
          description: 'Name of the Node this pod is assigned to.',
          cell: (p) => none(p.spec?.nodeName),
        },
        { name: 'Nominated Node', type: 'string', priority: 1, cell: (p) => none(p.status?.nominatedNodeName) },
        { name: 'Readiness Gates', type: 'string', priority: 1, cell: () => '<none>' },
      ];
    case 'apps/deployments':
      return [
        NAME,
        {
          name: 'Ready',
          type: 'string',
          description: 'Number of the pod with ready state',
          cell: (d) => `${d.status?.readyReplicas ?? 0}/${d.spec?.replicas ?? 0}`,
        },
        {
          name: 'Up-to-date',
          type: 'string',
          description:
            'Total number of non-terminated pods targeted by this deployment that have the desired template spec.',
          cell: (d) => d.status?.updatedReplicas ?? 0,
        },
        {
          name: 'Available',
          type: 'string',
          description:
            'Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.',
          cell: (d) => d.status?.availableReplicas ?? 0,
        },
        AGE,
        ...POD_TEMPLATE_WIDE,
      ];
    case 'apps/replicasets':
      return [
        NAME,
        { name: 'Desired', type: 'integer', cell: (r) => r.spec?.replicas ?? 0 },
        { name: 'Current', type: 'integer', cell: (r) => r.status?.replicas ?? 0 },
        { name: 'Ready', type: 'integer', cell: (r) => r.status?.readyReplicas ?? 0 },
        AGE,
        ...POD_TEMPLATE_WIDE,
      ];
    case 'batch/jobs':
      return [
        NAME,
        { name: 'Status', type: 'string', cell: jobStatus },
        { name: 'Completions', type: 'string', cell: (j) => `${j.status?.succeeded ?? 0}/${j.spec?.completions ?? 1}` },
        {
          name: 'Duration',
          type: 'string',
          cell: (j) =>
            j.status?.startTime
              ? humanDuration(
                  (j.status.completionTime ? Date.parse(j.status.completionTime) : Date.now()) -
                    Date.parse(j.status.startTime),
                )
              : '',
        },
        AGE,
      ];
    case '/services':
      return [
        NAME,
        { name: 'Type', type: 'string', cell: (s) => s.spec?.type ?? 'ClusterIP' },
        { name: 'Cluster-IP', type: 'string', cell: (s) => none(s.spec?.clusterIP) },
        { name: 'External-IP', type: 'string', cell: (s) => none((s.spec?.externalIPs ?? []).join(',')) },
        { name: 'Port(s)', type: 'string', cell: servicePorts },
        AGE,
        { name: 'Selector', type: 'string', priority: 1, cell: (s) => selectorText(s.spec?.selector) },
      ];
    case '/endpoints':
      return [
        NAME,
        {
          name: 'Endpoints',
          type: 'string',
          cell: (e) =>
            none(
              (e.subsets ?? [])
                .flatMap((s: K8sObject) =>
                  (s.addresses ?? []).flatMap((a: K8sObject) =>
                    (s.ports ?? []).map((p: K8sObject) => `${a.ip}:${p.port}`),
                  ),
                )
                .join(','),
            ),
        },
        AGE,
      ];
    case '/configmaps':
      return [
        NAME,
        {
          name: 'Data',
          type: 'integer',
          cell: (c) => Object.keys(c.data ?? {}).length + Object.keys(c.binaryData ?? {}).length,
        },
        AGE,
      ];
    case '/secrets':
      return [
        NAME,
        { name: 'Type', type: 'string', cell: (s) => s.type },
        { name: 'Data', type: 'integer', cell: (s) => Object.keys(s.data ?? {}).length },
        AGE,
      ];
    case '/namespaces':
      return [NAME, { name: 'Status', type: 'string', cell: (n) => n.status?.phase ?? 'Active' }, AGE];
    case '/nodes':
      return [
        NAME,
        {
          name: 'Status',
          type: 'string',
          cell: (n) =>
            (n.status?.conditions ?? []).some((c: K8sObject) => c.type === 'Ready' && c.status === 'True')
              ? 'Ready'
              : 'NotReady',
        },
        { name: 'Roles', type: 'string', cell: () => '<none>' },
        AGE,
        { name: 'Version', type: 'string', cell: (n) => n.status?.nodeInfo?.kubeletVersion ?? '' },
        {
          name: 'Internal-IP',
          type: 'string',
          priority: 1,
          cell: (n) => none((n.status?.addresses ?? []).find((a: K8sObject) => a.type === 'InternalIP')?.address),
        },
      ];
    case '/serviceaccounts':
      return [NAME, { name: 'Secrets', type: 'string', cell: (s) => (s.secrets ?? []).length }, AGE];
    case '/events':
      return [
        {
          name: 'Last Seen',
          type: 'string',
          cell: (e) =>
            humanDuration(Date.now() - Date.parse(e.lastTimestamp ?? e.eventTime ?? e.metadata.creationTimestamp)),
        },
        { name: 'Type', type: 'string', cell: (e) => e.type ?? '' },
        { name: 'Reason', type: 'string', cell: (e) => e.reason ?? '' },
        {
          name: 'Object',
          type: 'string',
          cell: (e) => `${String(e.involvedObject?.kind ?? '').toLowerCase()}/${e.involvedObject?.name ?? ''}`,
        },
        { name: 'Message', type: 'string', cell: (e) => e.message ?? '' },
        { ...NAME, priority: 1 },
      ];
    case 'coordination.k8s.io/leases':
      return [NAME, { name: 'Holder', type: 'string', cell: (l) => l.spec?.holderIdentity ?? '' }, AGE];
    case 'apiregistration.k8s.io/apiservices':
      return [
        NAME,
        {
          name: 'Service',
          type: 'string',
          cell: (a) => (a.spec?.service ? `${a.spec.service.namespace}/${a.spec.service.name}` : 'Local'),
        },
        {
          name: 'Available',
          type: 'string',
          cell: (a) => {
            const c = (a.status?.conditions ?? []).find((x: K8sObject) => x.type === 'Available');
            return c ? (c.status === 'True' ? 'True' : `${c.status} (${c.reason})`) : 'Unknown';
          },
        },
        AGE,
      ];
    case 'apiextensions.k8s.io/customresourcedefinitions':
      return [NAME, { name: 'Created At', type: 'date', cell: (c) => c.metadata.creationTimestamp }];
    default:
      if (t.printerColumns?.length) {
        return [
          NAME,
          ...t.printerColumns.map((c) => ({
            name: c.name,
            type: c.type,
            format: c.format,
            priority: c.priority ?? 0,
            description: c.description,
            cell: (o: K8sObject) => jsonPathValue(o, c.jsonPath, c.type),
          })),
          ...(t.printerColumns.some((c) => c.name === 'Age') ? [] : [AGE]),
        ];
      }
      return [NAME, AGE];
  }
}

/** The simple `.a.b[0].c` JSONPath subset that CRD printer columns use. */
function jsonPathValue(o: K8sObject, path: string, type: string): unknown {
  let cur: any = o;
  for (const part of path
    .replace(/^\./, '')
    .split(/\.|\[(\d+)\]/)
    .filter((p) => p !== undefined && p !== '')) {
    if (cur == null) break;
    cur = cur[/^\d+$/.test(part) ? Number(part) : part];
  }
  if (type === 'date' && typeof cur === 'string') return humanDuration(Date.now() - Date.parse(cur));
  return cur ?? null;
}

export function wantsTable(accept: string | undefined): boolean {
  return /as=Table/.test(accept ?? '');
}

export function toTable(
  t: ResourceType,
  items: K8sObject[],
  listMeta: K8sObject,
  includeObject: string | undefined,
): K8sObject {
  const cols = columnsFor(t);
  return {
    kind: 'Table',
    apiVersion: 'meta.k8s.io/v1',
    metadata: listMeta,
    columnDefinitions: cols.map((c) => ({
      name: c.name,
      type: c.type,
      format: c.format ?? '',
      description: c.description ?? '',
      priority: c.priority ?? 0,
    })),
    rows: items.map((o) => {
      const row: K8sObject = { cells: cols.map((c) => c.cell(o)) };
      if (includeObject === 'Object') row.object = o;
      else if (includeObject !== 'None')
        row.object = { kind: 'PartialObjectMetadata', apiVersion: 'meta.k8s.io/v1', metadata: o.metadata };
      return row;
    }),
  };
}
