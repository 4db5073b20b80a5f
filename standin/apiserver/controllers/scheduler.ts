// The one-node scheduler: binds every pending pod to the node (spec.nodeName + PodScheduled), as kube-scheduler would.
import type { K8sObject } from '../errors.js';
import { nowTime, type Objects } from '../objects.js';
import { recordEvent } from './events.js';
import type { Controller } from './loop.js';

const DEFAULT_SCHEDULER = 'default-scheduler';

export function scheduler(nodeName: string): Controller {
  return {
    name: 'scheduler',
    watches: ['/pods', '/nodes'],
    reconcile(objects: Objects) {
      if (!objects.store.get('/nodes', '', nodeName)) return;
      const podType = objects.type('/pods');
      for (const pod of objects.store.list('/pods')) {
        if (pod.spec?.nodeName || pod.metadata.deletionTimestamp) continue;
        // kube-scheduler takes only the pods that name it; a pod for another scheduler waits for its binding.
        if ((pod.spec?.schedulerName ?? DEFAULT_SCHEDULER) !== DEFAULT_SCHEDULER) continue;
        const ns = pod.metadata.namespace;
        const bound = objects.update(podType, ns, pod.metadata.name, { ...pod, spec: { ...pod.spec, nodeName } });
        const conditions = [
          ...(bound.status?.conditions ?? []).filter((c: K8sObject) => c.type !== 'PodScheduled'),
          { type: 'PodScheduled', status: 'True', lastProbeTime: null, lastTransitionTime: nowTime() },
        ];
        objects.update(
          podType,
          ns,
          pod.metadata.name,
          { ...bound, status: { ...(bound.status ?? {}), conditions } },
          { subresource: 'status' },
        );
        recordEvent(
          objects,
          bound,
          'Normal',
          'Scheduled',
          `Successfully assigned ${ns}/${pod.metadata.name} to ${nodeName}`,
          DEFAULT_SCHEDULER,
        );
      }
    },
  };
}
