// deploy/NAME: the Deployment's pods, by its selector.
import type { KindResolver } from './resolver.js';

export const deploymentResolver: KindResolver = {
  plural: 'deployments',
  resource: 'deployments.apps',
  async read({ apps }, name, namespace) {
    return { kind: 'selector', selector: (await apps.readNamespacedDeployment({ name, namespace })).spec?.selector };
  },
  async names({ apps }, namespace) {
    return (await apps.listNamespacedDeployment({ namespace })).items.map((x) => x.metadata?.name ?? '');
  },
};
