// Pod volumes the stand-in supports — the service-account token (automounted at /var/run/secrets/kubernetes.io/
// serviceaccount), configMap, secret, emptyDir and projected (serviceAccountToken, configMap, secret, downwardAPI
// namespace) — written to a per-pod directory and bind-mounted by the runtime (mounts of the container's OCI spec).
import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1Container, V1EphemeralContainer, V1Pod, V1Volume } from '@kubernetes/client-node';
import { EnvConfigError, type EnvSources } from './env.js';

export const SERVICE_ACCOUNT_PATH = '/var/run/secrets/kubernetes.io/serviceaccount';
/** The automounted volume's name, as the ServiceAccount admission plugin names it (kube-api-access-<suffix>). */
const SA_VOLUME = 'kube-api-access';

export interface Mount {
  source: string;
  target: string;
  readOnly: boolean;
}

function writeItems(dir: string, entries: Record<string, string>, items?: Array<{ key: string; path: string }>): void {
  mkdirSync(dir, { recursive: true });
  const chosen = items?.length ? items.map((i) => [i.path, entries[i.key] ?? ''] as const) : Object.entries(entries);
  for (const [path, value] of chosen) {
    mkdirSync(join(dir, path, '..'), { recursive: true });
    writeFileSync(join(dir, path), value);
  }
}

function secretEntries(data: Record<string, string> = {}): Record<string, string> {
  return Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]));
}

async function writeVolume(volume: V1Volume, dir: string, pod: V1Pod, sources: EnvSources): Promise<void> {
  const ns = pod.metadata?.namespace ?? 'default';
  if (volume.emptyDir) {
    mkdirSync(dir, { recursive: true });
    // As kubelet makes it: writable by every user of the pod's containers (not only by root, through the umask).
    chmodSync(dir, 0o777);
  } else if (volume.configMap) {
    const cm = await sources.configMap(ns, volume.configMap.name ?? '');
    if (!cm && !volume.configMap.optional) throw new EnvConfigError(`configmap "${volume.configMap.name}" not found`);
    writeItems(dir, cm?.data ?? {}, volume.configMap.items);
  } else if (volume.secret) {
    const secret = await sources.secret(ns, volume.secret.secretName ?? '');
    if (!secret && !volume.secret.optional) throw new EnvConfigError(`secret "${volume.secret.secretName}" not found`);
    writeItems(dir, secretEntries(secret?.data), volume.secret.items);
  } else if (volume.projected) {
    mkdirSync(dir, { recursive: true });
    for (const source of volume.projected.sources ?? []) {
      if (source.serviceAccountToken) {
        const token = await sources.serviceAccountToken?.(
          ns,
          pod.spec?.serviceAccountName ?? 'default',
          source.serviceAccountToken.expirationSeconds,
        );
        writeFileSync(join(dir, source.serviceAccountToken.path), token ?? '');
      } else if (source.configMap) {
        const cm = await sources.configMap(ns, source.configMap.name ?? '');
        if (cm?.data?.['ca.crt'] === undefined && source.configMap.name === 'kube-root-ca.crt') {
          writeItems(dir, { 'ca.crt': sources.caPem?.() ?? '' }, source.configMap.items);
        } else {
          writeItems(dir, cm?.data ?? {}, source.configMap.items);
        }
      } else if (source.secret) {
        const secret = await sources.secret(ns, source.secret.name ?? '');
        writeItems(dir, secretEntries(secret?.data), source.secret.items);
      } else if (source.downwardAPI) {
        for (const item of source.downwardAPI.items ?? []) {
          if (item.fieldRef?.fieldPath === 'metadata.namespace') writeFileSync(join(dir, item.path), ns);
          if (item.fieldRef?.fieldPath === 'metadata.name')
            writeFileSync(join(dir, item.path), pod.metadata?.name ?? '');
        }
      }
    }
  } else {
    // hostPath and other kinds: the host's path is used as it is.
  }
}

function automounts(pod: V1Pod): boolean {
  return pod.spec?.automountServiceAccountToken !== false;
}

/** Writes every volume of the pod under podDir; returns the source directory of each volume by name. */
export async function preparePodVolumes(pod: V1Pod, podDir: string, sources: EnvSources): Promise<Map<string, string>> {
  const dirs = new Map<string, string>();
  for (const volume of pod.spec?.volumes ?? []) {
    if (volume.hostPath) {
      // containerd's CRI plugin creates a missing hostPath source as a directory (the Docker behaviour it kept).
      if (!existsSync(volume.hostPath.path) && volume.hostPath.type !== 'File')
        mkdirSync(volume.hostPath.path, { recursive: true });
      dirs.set(volume.name, volume.hostPath.path);
      continue;
    }
    const dir = join(podDir, 'volumes', volume.name);
    await writeVolume(volume, dir, pod, sources);
    dirs.set(volume.name, dir);
  }
  if (automounts(pod)) {
    const dir = join(podDir, 'volumes', SA_VOLUME);
    const ns = pod.metadata?.namespace ?? 'default';
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      join(dir, 'token'),
      (await sources.serviceAccountToken?.(ns, pod.spec?.serviceAccountName ?? 'default')) ?? '',
    );
    writeFileSync(join(dir, 'ca.crt'), sources.caPem?.() ?? '');
    writeFileSync(join(dir, 'namespace'), ns);
    dirs.set(SA_VOLUME, dir);
  }
  return dirs;
}

/** The bind mounts of one container: its volumeMounts, plus the service-account volume unless it mounts that path. */
export function containerMounts(
  pod: V1Pod,
  container: V1Container | V1EphemeralContainer,
  volumeDirs: Map<string, string>,
): Mount[] {
  const mounts: Mount[] = [];
  for (const vm of container.volumeMounts ?? []) {
    const dir = volumeDirs.get(vm.name);
    if (!dir) continue;
    mounts.push({
      source: vm.subPath ? join(dir, vm.subPath) : dir,
      target: vm.mountPath,
      readOnly: Boolean(vm.readOnly),
    });
  }
  const sa = volumeDirs.get(SA_VOLUME);
  if (sa && automounts(pod) && !mounts.some((m) => m.target.replace(/\/$/, '') === SERVICE_ACCOUNT_PATH)) {
    mounts.push({ source: sa, target: SERVICE_ACCOUNT_PATH, readOnly: true });
  }
  return mounts;
}
