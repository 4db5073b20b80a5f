// Pod Security admission on pod create, as k8s.io/pod-security-admission does it: a namespace's
// `pod-security.kubernetes.io/enforce` level refuses a pod with 403, its `warn` level adds a Warning, both worded as
// upstream words them (admission/admission.go, policy/check_*.go, policy/checks.go).
import { ApiError, type K8sObject } from './errors.js';

const LABEL = 'pod-security.kubernetes.io';
type Level = 'privileged' | 'baseline' | 'restricted';
const LEVELS: Level[] = ['privileged', 'baseline', 'restricted'];

interface Violation {
  reason: string;
  detail: string;
}

type Check = (spec: K8sObject) => Violation | undefined;

/** policy/helpers.go: `"a", "b"`. */
const joinQuote = (items: string[]) => items.map((x) => JSON.stringify(x)).join(', ');
const plural = (one: string, many: string, n: number) => (n === 1 ? one : many);
const sorted = (s: Set<string>) => [...s].sort();

/** policy/visitor.go: init containers, containers and ephemeral containers, in that order. */
function containers(spec: K8sObject): K8sObject[] {
  return [...(spec.initContainers ?? []), ...(spec.containers ?? []), ...(spec.ephemeralContainers ?? [])];
}

/** Containers failing `bad`, as "container(s) "a", "b"". */
function badContainers(spec: K8sObject, bad: (c: K8sObject) => boolean): string[] {
  return containers(spec)
    .filter(bad)
    .map((c) => String(c.name));
}
const named = (names: string[]) => `${plural('container', 'containers', names.length)} ${joinQuote(names)}`;

/** policy/check_capabilities_baseline.go: the capabilities a container may add at baseline. */
const BASELINE_CAPABILITIES = new Set([
  'AUDIT_WRITE',
  'CHOWN',
  'DAC_OVERRIDE',
  'FOWNER',
  'FSETID',
  'KILL',
  'MKNOD',
  'NET_BIND_SERVICE',
  'SETFCAP',
  'SETGID',
  'SETPCAP',
  'SETUID',
  'SYS_CHROOT',
]);

const capabilitiesBaseline: Check = (spec) => {
  const caps = new Set<string>();
  const names = badContainers(spec, (c) => {
    const extra = (c.securityContext?.capabilities?.add ?? []).filter((x: string) => !BASELINE_CAPABILITIES.has(x));
    for (const x of extra) caps.add(x);
    return extra.length > 0;
  });
  if (!names.length) return undefined;
  const detail = `${named(names)} must not include ${joinQuote(sorted(caps))} in securityContext.capabilities.add`;
  return { reason: 'non-default capabilities', detail };
};

/** policy/check_hostNamespaces.go */
const hostNamespaces: Check = (spec) => {
  const set = (['hostIPC', 'hostNetwork', 'hostPID'] as const).filter((k) => spec[k] === true);
  return set.length ? { reason: 'host namespaces', detail: set.map((k) => `${k}=true`).join(', ') } : undefined;
};

/** policy/check_hostPathVolumes.go */
const hostPathVolumes: Check = (spec) => {
  const names = (spec.volumes ?? []).filter((v: K8sObject) => v.hostPath).map((v: K8sObject) => String(v.name));
  if (!names.length) return undefined;
  return { reason: 'hostPath volumes', detail: `${plural('volume', 'volumes', names.length)} ${joinQuote(names)}` };
};

/** policy/check_hostPorts.go */
const hostPorts: Check = (spec) => {
  const ports = new Set<string>();
  const names = badContainers(spec, (c) => {
    const used = (c.ports ?? []).filter((p: K8sObject) => p.hostPort);
    for (const p of used) ports.add(String(p.hostPort));
    return used.length > 0;
  });
  if (!names.length) return undefined;
  const list = sorted(ports);
  const detail =
    `${named(names)} ${plural('uses', 'use', names.length)} ` +
    `${plural('hostPort', 'hostPorts', list.length)} ${list.join(', ')}`;
  return { reason: 'hostPort', detail };
};

/** policy/check_privileged.go */
const privileged: Check = (spec) => {
  const names = badContainers(spec, (c) => c.securityContext?.privileged === true);
  if (!names.length) return undefined;
  return { reason: 'privileged', detail: `${named(names)} must not set securityContext.privileged=true` };
};

/** policy/check_allowPrivilegeEscalation.go: unset counts as true. */
const allowPrivilegeEscalation: Check = (spec) => {
  const names = badContainers(spec, (c) => c.securityContext?.allowPrivilegeEscalation !== false);
  if (!names.length) return undefined;
  const detail = `${named(names)} must set securityContext.allowPrivilegeEscalation=false`;
  return { reason: 'allowPrivilegeEscalation != false', detail };
};

/** policy/check_capabilities_restricted.go: drop ALL, add nothing but NET_BIND_SERVICE. */
const capabilitiesRestricted: Check = (spec) => {
  const caps = new Set<string>();
  const noDropAll = badContainers(spec, (c) => !(c.securityContext?.capabilities?.drop ?? []).includes('ALL'));
  const adding = badContainers(spec, (c) => {
    const extra = (c.securityContext?.capabilities?.add ?? []).filter((x: string) => x !== 'NET_BIND_SERVICE');
    for (const x of extra) caps.add(x);
    return extra.length > 0;
  });
  const details: string[] = [];
  if (noDropAll.length) details.push(`${named(noDropAll)} must set securityContext.capabilities.drop=["ALL"]`);
  if (adding.length)
    details.push(`${named(adding)} must not include ${joinQuote(sorted(caps))} in securityContext.capabilities.add`);
  return details.length ? { reason: 'unrestricted capabilities', detail: details.join('; ') } : undefined;
};

/** policy/check_restrictedVolumes.go: the volume sources a restricted pod may use. */
const ALLOWED_VOLUMES = new Set([
  'configMap',
  'csi',
  'downwardAPI',
  'emptyDir',
  'ephemeral',
  'persistentVolumeClaim',
  'projected',
  'secret',
]);

const restrictedVolumes: Check = (spec) => {
  const names: string[] = [];
  const types = new Set<string>();
  for (const v of spec.volumes ?? []) {
    const sources = Object.keys(v).filter((k) => k !== 'name');
    if (sources.some((k) => ALLOWED_VOLUMES.has(k))) continue;
    names.push(String(v.name));
    types.add(sources[0] ?? 'unknown');
  }
  if (!names.length) return undefined;
  const list = sorted(types);
  const detail =
    `${plural('volume', 'volumes', names.length)} ${joinQuote(names)} ${plural('uses', 'use', names.length)} ` +
    `${plural('restricted volume type', 'restricted volume types', list.length)} ${joinQuote(list)}`;
  return { reason: 'restricted volume types', detail };
};

/**
 * The "pod or containers" checks (runAsNonRoot, seccompProfile): the pod's setting covers containers that set none;
 * an explicit bad value on the pod or a container is named first.
 */
function podOrContainers(
  spec: K8sObject,
  read: (securityContext: K8sObject | undefined) => unknown,
  good: (value: unknown) => boolean,
): { explicit: string[]; implicit: string[]; badValues: Set<string> } {
  const badValues = new Set<string>();
  const explicit: string[] = [];
  const podValue = read(spec.securityContext);
  let podGood = false;
  if (podValue !== undefined && podValue !== null) {
    if (good(podValue)) podGood = true;
    else {
      explicit.push('pod');
      badValues.add(String(podValue));
    }
  }
  const explicitContainers: string[] = [];
  const implicit: string[] = [];
  for (const c of containers(spec)) {
    const value = read(c.securityContext);
    if (value !== undefined && value !== null) {
      if (!good(value)) {
        explicitContainers.push(String(c.name));
        badValues.add(String(value));
      }
    } else if (!podGood) implicit.push(String(c.name));
  }
  if (explicitContainers.length) explicit.push(named(explicitContainers));
  return { explicit, implicit, badValues };
}

/** policy/check_runAsNonRoot.go */
const runAsNonRoot: Check = (spec) => {
  const r = podOrContainers(
    spec,
    (sc) => sc?.runAsNonRoot,
    (v) => v === true,
  );
  const reason = 'runAsNonRoot != true';
  if (r.explicit.length)
    return { reason, detail: `${r.explicit.join(' and ')} must not set securityContext.runAsNonRoot=false` };
  if (r.implicit.length)
    return { reason, detail: `pod or ${named(r.implicit)} must set securityContext.runAsNonRoot=true` };
  return undefined;
};

/** policy/check_seccompProfile_restricted.go */
const seccompProfile: Check = (spec) => {
  const r = podOrContainers(
    spec,
    (sc) => sc?.seccompProfile?.type,
    (v) => v === 'RuntimeDefault' || v === 'Localhost',
  );
  const reason = 'seccompProfile';
  if (r.explicit.length) {
    const values = joinQuote(sorted(r.badValues));
    return {
      reason,
      detail: `${r.explicit.join(' and ')} must not set securityContext.seccompProfile.type to ${values}`,
    };
  }
  if (r.implicit.length) {
    const types = '"RuntimeDefault" or "Localhost"';
    return { reason, detail: `pod or ${named(r.implicit)} must set securityContext.seccompProfile.type to ${types}` };
  }
  return undefined;
};

/**
 * The checks of each level in upstream's order (policy/registry.go: baseline before restricted, each sorted by
 * check ID). Restricted replaces capabilities_baseline and hostPathVolumes by its stricter checks, as their
 * `Overlap` says.
 */
const BASELINE: Check[] = [capabilitiesBaseline, hostNamespaces, hostPathVolumes, hostPorts, privileged];
const RESTRICTED: Check[] = [
  hostNamespaces,
  hostPorts,
  privileged,
  allowPrivilegeEscalation,
  capabilitiesRestricted,
  restrictedVolumes,
  runAsNonRoot,
  seccompProfile,
];

/** policy/checks.go ForbiddenDetail: `reason (detail), reason (detail)`. */
export function podSecurityViolations(level: Level, spec: K8sObject): string | undefined {
  const checks = level === 'restricted' ? RESTRICTED : level === 'baseline' ? BASELINE : [];
  const found = checks.map((c) => c(spec ?? {})).filter((v): v is Violation => v !== undefined);
  return found.length ? found.map((v) => (v.detail ? `${v.reason} (${v.detail})` : v.reason)).join(', ') : undefined;
}

/**
 * A mode's level and version from the namespace's labels (api/helpers.go PolicyToEvaluate): no label is privileged;
 * a value that is no level is evaluated as restricted, as upstream fails closed.
 */
function policyOf(labels: Record<string, string>, mode: 'enforce' | 'warn'): { level: Level; name: string } {
  const value = labels[`${LABEL}/${mode}`];
  const level: Level =
    value === undefined ? 'privileged' : LEVELS.includes(value as Level) ? (value as Level) : 'restricted';
  // The version label only names the policy here: the checks are always the latest ones.
  const version = labels[`${LABEL}/${mode}-version`] || 'latest';
  return { level, name: `${level}:${version}` };
}

/**
 * Admits a pod being created in a namespace with these labels: throws kube-apiserver's 403 when the enforce level
 * refuses it; otherwise passes the warn level's complaint to `warn`.
 */
export function admitPodSecurity(
  namespaceLabels: Record<string, string> | undefined,
  pod: K8sObject,
  warn?: (text: string) => void,
): void {
  const labels = namespaceLabels ?? {};
  const enforce = policyOf(labels, 'enforce');
  const refused = podSecurityViolations(enforce.level, pod.spec);
  if (refused) {
    const name = JSON.stringify(pod.metadata?.name ?? '');
    const message = `pods ${name} is forbidden: violates PodSecurity ${JSON.stringify(enforce.name)}: ${refused}`;
    throw new ApiError(403, 'Forbidden', message, { name: pod.metadata?.name, kind: 'pods' });
  }
  const warnPolicy = policyOf(labels, 'warn');
  const warned = podSecurityViolations(warnPolicy.level, pod.spec);
  if (warned && warn) warn(`would violate PodSecurity ${JSON.stringify(warnPolicy.name)}: ${warned}`);
}
