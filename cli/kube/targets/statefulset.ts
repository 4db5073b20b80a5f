// sts/NAME: the StatefulSet's pods, by its selector.
import type { KindResolver } from './resolver.js';

export const statefulSetResolver: KindResolver = {
  plural: 'statefulsets',
  resource: 'statefulsets.apps',
  async read({ apps }, name, namespace) {
    return { kind: 'selector', selector: (await apps.readNamespacedStatefulSet({ name, namespace })).spec?.selector };
  },
  async names({ apps }, namespace) {
    return (await apps.listNamespacedStatefulSet({ namespace })).items.map((x) => x.metadata?.name ?? '');
  },
};
