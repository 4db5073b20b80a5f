// Kubeconfig files for the stand-in: one with the admin and restricted users (admin current), one restricted-only.
import { writeFile } from 'node:fs/promises';
import { stringify } from 'yaml';

export interface KubeconfigInput {
  path: string;
  clusterName: string;
  server: string;
  caPem: string;
  users: { name: string; token: string }[];
  /** The user of the current context. */
  current: string;
  namespace: string;
}

export function kubeconfigText(k: Omit<KubeconfigInput, 'path'>): string {
  const contextName = (user: string) => `${k.clusterName}-${user}`;
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    preferences: {},
    clusters: [
      {
        name: k.clusterName,
        cluster: { server: k.server, 'certificate-authority-data': Buffer.from(k.caPem).toString('base64') },
      },
    ],
    users: k.users.map((u) => ({ name: u.name, user: { token: u.token } })),
    contexts: k.users.map((u) => ({
      name: contextName(u.name),
      context: { cluster: k.clusterName, user: u.name, namespace: k.namespace },
    })),
    'current-context': contextName(k.current),
  });
}

export async function writeKubeconfig(k: KubeconfigInput): Promise<void> {
  await writeFile(k.path, kubeconfigText(k), { mode: 0o600 });
}
