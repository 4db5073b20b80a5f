// Per-kind defaulting and validation on create/update, as kube-apiserver's strategies do for the fields clients rely
// on.
import { randomUUID } from 'node:crypto';
import { defaultWebhookConfiguration, MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS } from './webhook-config.js';
import { invalid, type K8sObject } from './errors.js';
import type { ResourceType } from './resources.js';
import { labelSelectorMatcher } from './selectors.js';
import { initServiceIPs, type ServiceIPs } from './service-ip-families.js';

const NAME_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_NAME_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const RANDOM_ALPHABET = 'bcdfghjklmnpqrstvwxz2456789';

export function randomSuffix(n = 5): string {
  let s = '';
  for (let i = 0; i < n; i++) s += RANDOM_ALPHABET[Math.floor(Math.random() * RANDOM_ALPHABET.length)];
  return s;
}

export function validateName(t: ResourceType, obj: K8sObject): void {
  const name: string = obj.metadata?.name ?? '';
  if (!name)
    throw invalid(t.kind, t.group, '', [
      {
        field: 'metadata.name',
        message: 'Required value: name or generateName is required',
        reason: 'FieldValueRequired',
      },
    ]);
  const re = t.resource === 'namespaces' || t.resource === 'services' ? LABEL_NAME_RE : NAME_RE;
  if (
    t.resource === 'customresourcedefinitions' ||
    t.resource === 'apiservices' ||
    t.custom ||
    t.group.startsWith('rbac.')
  )
    return;
  if (name.length > 253 || !re.test(name)) {
    throw invalid(t.kind, t.group, name, [
      {
        field: 'metadata.name',
        message:
          `Invalid value: "${name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric ` +
          `characters, '-' or '.', and must start and end with an alphanumeric character`,
      },
    ]);
  }
}

function defaultContainer(c: K8sObject): void {
  const image: string = c.image ?? '';
  const tagged = /:[^/]+$/.test(image) || image.includes('@');
  c.imagePullPolicy ??= !tagged || image.endsWith(':latest') ? 'Always' : 'IfNotPresent';
  c.terminationMessagePath ??= '/dev/termination-log';
  c.terminationMessagePolicy ??= 'File';
  c.resources ??= {};
  for (const p of c.ports ?? []) p.protocol ??= 'TCP';
}

export function defaultContainerList(list: K8sObject[]): void {
  for (const c of list) defaultContainer(c);
}

export function defaultPodSpec(spec: K8sObject): void {
  spec.restartPolicy ??= 'Always';
  spec.terminationGracePeriodSeconds ??= 30;
  spec.dnsPolicy ??= 'ClusterFirst';
  spec.securityContext ??= {};
  spec.schedulerName ??= 'default-scheduler';
  spec.enableServiceLinks ??= true;
  spec.serviceAccountName ??= spec.serviceAccount ?? 'default';
  spec.serviceAccount ??= spec.serviceAccountName;
  for (const c of [...(spec.containers ?? []), ...(spec.initContainers ?? []), ...(spec.ephemeralContainers ?? [])])
    defaultContainer(c);
}

function validatePodSpec(t: ResourceType, name: string, spec: K8sObject | undefined, field: string): void {
  if (!spec || !Array.isArray(spec.containers) || spec.containers.length === 0) {
    throw invalid(t.kind, t.group, name, [
      { field: `${field}.containers`, message: 'Required value', reason: 'FieldValueRequired' },
    ]);
  }
  for (const [i, c] of spec.containers.entries()) {
    if (!c.name)
      throw invalid(t.kind, t.group, name, [
        { field: `${field}.containers[${i}].name`, message: 'Required value', reason: 'FieldValueRequired' },
      ]);
    if (!c.image)
      throw invalid(t.kind, t.group, name, [
        { field: `${field}.containers[${i}].image`, message: 'Required value', reason: 'FieldValueRequired' },
      ]);
  }
}

function validateSelector(t: ResourceType, obj: K8sObject): void {
  const labels = obj.spec?.template?.metadata?.labels ?? {};
  const sel = obj.spec?.selector;
  if (!sel || (Object.keys(sel.matchLabels ?? {}).length === 0 && (sel.matchExpressions ?? []).length === 0)) {
    throw invalid(t.kind, t.group, obj.metadata.name, [
      { field: 'spec.selector', message: 'Required value', reason: 'FieldValueRequired' },
    ]);
  }
  if (!labelSelectorMatcher(sel)({ metadata: { labels } })) {
    throw invalid(t.kind, t.group, obj.metadata.name, [
      {
        field: 'spec.template.metadata.labels',
        message: `Invalid value: ${JSON.stringify(labels)}: \`selector\` does not match template \`labels\``,
      },
    ]);
  }
}

export interface DefaultingContext {
  /** The cluster's Service families and ClusterIP allocation (service-ip-families.ts). */
  serviceIPs: ServiceIPs;
}

/** Fills server-side defaults of a new object and validates it; `obj` is owned by the caller and mutated in place. */
function defaultDeploymentSpec(spec: K8sObject): void {
  spec.replicas ??= 1;
  spec.strategy ??= {};
  spec.strategy.type ??= 'RollingUpdate';
  if (spec.strategy.type === 'RollingUpdate')
    spec.strategy.rollingUpdate ??= { maxSurge: '25%', maxUnavailable: '25%' };
  spec.revisionHistoryLimit ??= 10;
  spec.progressDeadlineSeconds ??= 600;
  if (spec.template?.spec) defaultPodSpec(spec.template.spec);
}

function defaultSecret(obj: K8sObject): void {
  obj.type ??= 'Opaque';
  if (obj.stringData) {
    obj.data = { ...(obj.data ?? {}) };
    for (const [k, v] of Object.entries(obj.stringData)) obj.data[k] = Buffer.from(String(v)).toString('base64');
    delete obj.stringData;
  }
}

/**
 * The defaults kube-apiserver applies to every object it decodes, on update as on create (a controller that replaces
 * a Deployment with only the fields it cares about gets the defaults back, and its pod template keeps its hash). Only
 * the kinds whose spec a client replaces; what only a create does (ClusterIP, status, names) stays in defaultOnCreate.
 */
export function defaultOnUpdate(t: ResourceType, obj: K8sObject): void {
  switch (`${t.group}/${t.resource}`) {
    case '/pods':
      if (obj.spec) defaultPodSpec(obj.spec);
      break;
    case 'apps/deployments':
      if (obj.spec) defaultDeploymentSpec(obj.spec);
      break;
    case 'apps/replicasets':
      if (obj.spec) obj.spec.replicas ??= 1;
      if (obj.spec?.template?.spec) defaultPodSpec(obj.spec.template.spec);
      break;
    case 'batch/jobs':
      if (obj.spec?.template?.spec) defaultPodSpec(obj.spec.template.spec);
      break;
    case '/secrets':
      defaultSecret(obj);
      break;
    default:
      break;
  }
}

export function defaultOnCreate(t: ResourceType, obj: K8sObject, ctx: DefaultingContext): void {
  const name = obj.metadata.name;
  const key = `${t.group}/${t.resource}`;
  switch (key) {
    case '/pods':
      validatePodSpec(t, name, obj.spec, 'spec');
      defaultPodSpec(obj.spec);
      obj.status = { phase: 'Pending', qosClass: 'BestEffort' };
      break;
    case 'apps/deployments':
      validateSelector(t, obj);
      validatePodSpec(t, name, obj.spec?.template?.spec, 'spec.template.spec');
      defaultDeploymentSpec(obj.spec);
      obj.status ??= {};
      break;
    case 'apps/replicasets':
      validateSelector(t, obj);
      obj.spec.replicas ??= 1;
      defaultPodSpec(obj.spec.template.spec);
      obj.status ??= { replicas: 0 };
      break;
    case 'batch/jobs': {
      validatePodSpec(t, name, obj.spec?.template?.spec, 'spec.template.spec');
      const spec = obj.spec;
      spec.parallelism ??= 1;
      spec.completions ??= 1;
      spec.backoffLimit ??= 6;
      spec.completionMode ??= 'NonIndexed';
      spec.suspend ??= false;
      if (!spec.manualSelector) {
        const uid = obj.metadata.uid;
        spec.selector = { matchLabels: { 'batch.kubernetes.io/controller-uid': uid } };
        spec.template.metadata ??= {};
        spec.template.metadata.labels = {
          ...(spec.template.metadata.labels ?? {}),
          'batch.kubernetes.io/controller-uid': uid,
          'batch.kubernetes.io/job-name': name,
          'controller-uid': uid,
          'job-name': name,
        };
      }
      defaultPodSpec(spec.template.spec);
      obj.status ??= {};
      break;
    }
    case '/services': {
      obj.spec ??= {};
      const spec = obj.spec;
      spec.type ??= 'ClusterIP';
      spec.sessionAffinity ??= 'None';
      for (const p of spec.ports ?? []) {
        p.protocol ??= 'TCP';
        p.targetPort ??= p.port;
      }
      if (spec.type !== 'ExternalName') {
        initServiceIPs(name, spec, ctx.serviceIPs);
        spec.internalTrafficPolicy ??= 'Cluster';
      }
      obj.status ??= { loadBalancer: {} };
      break;
    }
    case '/namespaces':
      obj.metadata.labels = { ...(obj.metadata.labels ?? {}), 'kubernetes.io/metadata.name': name };
      obj.spec = { finalizers: ['kubernetes'] };
      obj.status = { phase: 'Active' };
      break;
    case '/secrets':
      defaultSecret(obj);
      break;
    case 'apiextensions.k8s.io/customresourcedefinitions': {
      const names = obj.spec?.names ?? {};
      if (
        !obj.spec?.group ||
        !names.plural ||
        !names.kind ||
        !Array.isArray(obj.spec?.versions) ||
        obj.spec.versions.length === 0
      ) {
        throw invalid(t.kind, t.group, name, [
          {
            field: 'spec',
            message: 'Required value: group, names.plural, names.kind and versions are required',
            reason: 'FieldValueRequired',
          },
        ]);
      }
      if (name !== `${names.plural}.${obj.spec.group}`) {
        throw invalid(t.kind, t.group, name, [
          { field: 'metadata.name', message: `Invalid value: "${name}": must be spec.names.plural+"."+spec.group` },
        ]);
      }
      names.singular ??= String(names.kind).toLowerCase();
      names.listKind ??= `${names.kind}List`;
      obj.spec.scope ??= 'Namespaced';
      const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
      obj.status = {
        acceptedNames: { ...names },
        storedVersions: obj.spec.versions.filter((v: K8sObject) => v.storage).map((v: K8sObject) => v.name),
        conditions: [
          {
            type: 'NamesAccepted',
            status: 'True',
            reason: 'NoConflicts',
            message: 'no conflicts found',
            lastTransitionTime: now,
          },
          {
            type: 'Established',
            status: 'True',
            reason: 'InitialNamesAccepted',
            message: 'the initial names have been accepted',
            lastTransitionTime: now,
          },
        ],
      };
      break;
    }
    case 'apiregistration.k8s.io/apiservices':
      obj.status ??= { conditions: [] };
      break;
    case VALIDATING_WEBHOOKS:
    case MUTATING_WEBHOOKS:
      defaultWebhookConfiguration(obj, key === MUTATING_WEBHOOKS);
      break;
    default:
      break;
  }
}

export function newUid(): string {
  return randomUUID();
}
