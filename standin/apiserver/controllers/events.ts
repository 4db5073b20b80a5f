// Events that the in-process controllers record, as kube-controller-manager and kube-scheduler do (kubectl describe).
import { randomBytes } from 'node:crypto';
import type { K8sObject } from '../errors.js';
import { nowTime, type Objects } from '../objects.js';

export function recordEvent(
  objects: Objects,
  involved: K8sObject,
  type: 'Normal' | 'Warning',
  reason: string,
  message: string,
  component: string,
): void {
  const ns = involved.metadata.namespace ?? 'default';
  const now = nowTime();
  try {
    objects.create(objects.type('/events'), ns, {
      metadata: { name: `${involved.metadata.name}.${randomBytes(8).toString('hex')}`, namespace: ns },
      involvedObject: {
        kind: involved.kind,
        namespace: involved.metadata.namespace,
        name: involved.metadata.name,
        uid: involved.metadata.uid,
        apiVersion: involved.apiVersion,
        resourceVersion: involved.metadata.resourceVersion,
      },
      reason,
      message,
      source: { component },
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
      type,
      eventTime: null,
      reportingComponent: component,
      reportingInstance: '',
    });
  } catch {
    // An event is best effort (e.g. its namespace is being deleted).
  }
}
