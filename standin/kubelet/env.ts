// A container's environment as kubelet builds it: service link variables, then envFrom, then env (valueFrom included),
// with $(VAR) references expanded; plus HOSTNAME and a PATH.
import type {
  V1ConfigMap,
  V1Container,
  V1EphemeralContainer,
  V1Pod,
  V1Secret,
  V1Service,
} from '@kubernetes/client-node';

/** What the env builder needs to look up; it returns undefined for a missing object. */
export interface EnvSources {
  configMap(namespace: string, name: string): Promise<V1ConfigMap | undefined>;
  secret(namespace: string, name: string): Promise<V1Secret | undefined>;
  /** Services of the pod's namespace, and the `kubernetes` service of `default`. */
  services(namespace: string): V1Service[];
  masterService(): V1Service | undefined;
  /** A token for the pod's service account (TokenRequest), for the automounted service-account volume. */
  serviceAccountToken?(
    namespace: string,
    serviceAccount: string,
    expirationSeconds?: number,
  ): Promise<string | undefined>;
  /** The cluster CA (PEM) for that volume's ca.crt. */
  caPem?(): string | undefined;
}

/** An env reference that cannot be resolved: kubelet reports CreateContainerConfigError with this message. */
export class EnvConfigError extends Error {}

export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

function envName(serviceName: string): string {
  return serviceName.toUpperCase().replace(/-/g, '_');
}

/** NAME_SERVICE_HOST/_PORT and the docker-link NAME_PORT_… variables of one service. */
export function serviceEnv(svc: V1Service): Record<string, string> {
  const ip = svc.spec?.clusterIP;
  const ports = svc.spec?.ports ?? [];
  if (!ip || ip === 'None' || ports.length === 0) return {};
  const name = envName(svc.metadata?.name ?? '');
  const env: Record<string, string> = {
    [`${name}_SERVICE_HOST`]: ip,
    [`${name}_SERVICE_PORT`]: String(ports[0].port),
  };
  for (const port of ports) {
    if (port.name) env[`${name}_SERVICE_PORT_${envName(port.name)}`] = String(port.port);
  }
  const first = ports[0];
  env[`${name}_PORT`] = `${(first.protocol ?? 'TCP').toLowerCase()}://${ip}:${first.port}`;
  for (const port of ports) {
    const proto = port.protocol ?? 'TCP';
    const prefix = `${name}_PORT_${port.port}_${proto}`;
    env[prefix] = `${proto.toLowerCase()}://${ip}:${port.port}`;
    env[`${prefix}_PROTO`] = proto.toLowerCase();
    env[`${prefix}_PORT`] = String(port.port);
    env[`${prefix}_ADDR`] = ip;
  }
  return env;
}

/** Expands $(VAR) from the variables defined so far; $$ escapes, unknown references stay as written. */
export function expandRefs(value: string, env: Record<string, string>): string {
  return value.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)/g, (match, name: string | undefined) => {
    if (match === '$$') return '$';
    return name !== undefined && name in env ? env[name] : match;
  });
}

function fieldPath(pod: V1Pod, path: string, ctx: PodEnvContext): string {
  const labelOrAnnotation = /^metadata\.(labels|annotations)\['(.+)'\]$/.exec(path);
  if (labelOrAnnotation) {
    const map = labelOrAnnotation[1] === 'labels' ? pod.metadata?.labels : pod.metadata?.annotations;
    return map?.[labelOrAnnotation[2]] ?? '';
  }
  switch (path) {
    case 'metadata.name':
      return pod.metadata?.name ?? '';
    case 'metadata.namespace':
      return pod.metadata?.namespace ?? '';
    case 'metadata.uid':
      return pod.metadata?.uid ?? '';
    case 'spec.nodeName':
      return pod.spec?.nodeName ?? '';
    case 'spec.serviceAccountName':
      return pod.spec?.serviceAccountName ?? 'default';
    // kubernetes pkg/kubelet/kubelet_pods.go podFieldSelectorRuntimeValue: the lists are joined with commas.
    case 'status.podIP':
      return ctx.podIP;
    case 'status.podIPs':
      return (ctx.podIPs ?? [ctx.podIP]).join(',');
    case 'status.hostIP':
    case 'status.hostIPs':
      return ctx.hostIP;
    default:
      throw new EnvConfigError(`unsupported fieldRef fieldPath "${path}"`);
  }
}

function decodeSecret(secret: V1Secret, key: string): string | undefined {
  const data = secret.data?.[key];
  if (data !== undefined) return Buffer.from(data, 'base64').toString('utf8');
  return secret.stringData?.[key];
}

export interface PodEnvContext {
  pod: V1Pod;
  container: V1Container | V1EphemeralContainer;
  podIP: string;
  /** Every pod IP, IPv4 first (a dual-stack pod has two); podIP alone when absent. */
  podIPs?: string[];
  hostIP: string;
  /** The sandbox's hostname, which the runtime gives every container as HOSTNAME (containerd container_create.go). */
  hostname: string;
  imageEnv?: Record<string, string>;
}

/** Builds the container's env; throws EnvConfigError for a missing (non-optional) configmap/secret or key. */
export async function buildContainerEnv(ctx: PodEnvContext, sources: EnvSources): Promise<Record<string, string>> {
  const { pod, container } = ctx;
  const namespace = pod.metadata?.namespace ?? 'default';
  const env: Record<string, string> = {
    PATH: DEFAULT_PATH,
    ...ctx.imageEnv,
    HOSTNAME: ctx.hostname,
  };

  const master = sources.masterService();
  if (master) Object.assign(env, serviceEnv(master));
  if (pod.spec?.enableServiceLinks !== false) {
    for (const svc of sources.services(namespace)) {
      if (namespace === 'default' && svc.metadata?.name === 'kubernetes') continue;
      Object.assign(env, serviceEnv(svc));
    }
  }

  for (const from of container.envFrom ?? []) {
    const prefix = from.prefix ?? '';
    if (from.configMapRef) {
      const cm = await sources.configMap(namespace, from.configMapRef.name ?? '');
      if (!cm) {
        if (from.configMapRef.optional) continue;
        throw new EnvConfigError(`configmap "${from.configMapRef.name}" not found`);
      }
      for (const [k, v] of Object.entries(cm.data ?? {})) env[prefix + k] = v;
    } else if (from.secretRef) {
      const secret = await sources.secret(namespace, from.secretRef.name ?? '');
      if (!secret) {
        if (from.secretRef.optional) continue;
        throw new EnvConfigError(`secret "${from.secretRef.name}" not found`);
      }
      for (const k of Object.keys({ ...secret.data, ...secret.stringData }))
        env[prefix + k] = decodeSecret(secret, k) ?? '';
    }
  }

  for (const item of container.env ?? []) {
    if (item.valueFrom === undefined) {
      env[item.name] = expandRefs(item.value ?? '', env);
      continue;
    }
    const { configMapKeyRef, secretKeyRef, fieldRef, resourceFieldRef } = item.valueFrom;
    if (configMapKeyRef) {
      const cm = await sources.configMap(namespace, configMapKeyRef.name ?? '');
      const value = cm?.data?.[configMapKeyRef.key];
      if (value === undefined) {
        if (configMapKeyRef.optional) continue;
        throw new EnvConfigError(
          cm
            ? `couldn't find key ${configMapKeyRef.key} in ConfigMap ${namespace}/${configMapKeyRef.name}`
            : `configmap "${configMapKeyRef.name}" not found`,
        );
      }
      env[item.name] = value;
    } else if (secretKeyRef) {
      const secret = await sources.secret(namespace, secretKeyRef.name ?? '');
      const value = secret ? decodeSecret(secret, secretKeyRef.key) : undefined;
      if (value === undefined) {
        if (secretKeyRef.optional) continue;
        throw new EnvConfigError(
          secret
            ? `couldn't find key ${secretKeyRef.key} in Secret ${namespace}/${secretKeyRef.name}`
            : `secret "${secretKeyRef.name}" not found`,
        );
      }
      env[item.name] = value;
    } else if (fieldRef) {
      env[item.name] = fieldPath(pod, fieldRef.fieldPath, ctx);
    } else if (resourceFieldRef) {
      // No resource accounting here: a limit that is set is reported, otherwise the node's (unbounded) capacity.
      const limits = (container as V1Container).resources?.limits ?? {};
      env[item.name] = String(limits[resourceFieldRef.resource.replace(/^limits\./, '')] ?? '0');
    }
  }
  return env;
}
