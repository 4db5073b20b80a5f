// rollout/NAME: an Argo Rollout's pods, by its selector. Rollouts are a custom resource: a cluster without Argo
// Rollouts answers 404 for every name, which is said as such rather than as "not found".
import type { V1LabelSelector } from '@kubernetes/client-node';
import { UserError } from '../../../shared/errors.js';
import { apiErrorCode } from '../errors.js';
import type { KindClients, KindResolver } from './resolver.js';

const ROLLOUTS = { group: 'argoproj.io', version: 'v1alpha1', plural: 'rollouts' } as const;

/** The Rollouts' names, or undefined when the cluster has no rollouts.argoproj.io API. */
async function rolloutNames({ custom }: KindClients, namespace: string): Promise<string[] | undefined> {
  try {
    const list = (await custom.listNamespacedCustomObject({ ...ROLLOUTS, namespace })) as {
      items?: { metadata?: { name?: string } }[];
    };
    return list.items?.map((x) => x.metadata?.name ?? '') ?? [];
  } catch (err) {
    if (apiErrorCode(err) === 404) return undefined;
    throw err;
  }
}

export const rolloutResolver: KindResolver = {
  plural: 'rollouts',
  resource: 'rollouts.argoproj.io',
  async read(clients, name, namespace) {
    // Listed beside the read: when the read is a 404, the list says whether the API exists at all.
    const listed = rolloutNames(clients, namespace);
    listed.catch(() => undefined);
    try {
      const rollout = (await clients.custom.getNamespacedCustomObject({ ...ROLLOUTS, namespace, name })) as {
        spec?: { selector?: V1LabelSelector };
      };
      return { kind: 'selector', selector: rollout.spec?.selector };
    } catch (err) {
      if (apiErrorCode(err) === 404 && (await listed.catch(() => [])) === undefined) {
        throw new UserError(
          'Argo Rollouts is not installed in this cluster (no rollouts.argoproj.io API)',
          "target the Rollout's pods with pod/NAME, or a deploy/ or sts/ target",
        );
      }
      throw err;
    }
  },
  async names(clients, namespace) {
    return (await rolloutNames(clients, namespace)) ?? [];
  },
};
