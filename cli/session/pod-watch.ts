// Which pods a supervised session watches, and what a list of them means for its members: a member whose pod is deleted
// or replaced is cut; with all pods, every Ready pod that is not a member yet is joined.
import type { KubeConfig, V1Pod } from '@kubernetes/client-node';
import { isPodReady, KIND_RESOLVERS, selectorToString, type ResolvedTarget } from '../kube/target.js';
import { kindClients } from '../kube/targets/resolver.js';
import { type Member, podFate } from './member.js';

export interface PodQuery {
  namespace: string;
  labelSelector?: string;
  fieldSelector?: string;
}

/**
 * Whether every Ready pod of the target is taken over: with --all-pods, and always for what the API server calls (an
 * APIService's or a webhook's pods), since it calls any pod behind the Service.
 */
export function takesAllPods(target: ResolvedTarget, allPodsAsked: boolean | undefined): boolean {
  const { ref, extension, webhooks } = target;
  return (Boolean(allPodsAsked) && ref.kind !== 'pod') || extension !== undefined || webhooks !== undefined;
}

/** The pod watched by name. */
export function podByName(target: ResolvedTarget): PodQuery {
  return { namespace: target.namespace, fieldSelector: `metadata.name=${target.podName}` };
}

/** The pods the watch looks at: the workload's (all pods) or the one pod by name. */
export async function podQuery(kc: KubeConfig, target: ResolvedTarget, allPods: boolean): Promise<PodQuery> {
  const { ref, namespace } = target;
  if (!allPods) return podByName(target);
  const workload = await KIND_RESOLVERS[ref.kind].read(kindClients(kc), ref.name, namespace, ref);
  const labelSelector = workload.kind === 'selector' ? selectorToString(workload.selector) : '';
  return labelSelector ? { namespace, labelSelector } : podByName(target);
}

/** What a list of the watched pods asks of the members. Pure. */
export function podChanges(
  pods: readonly V1Pod[],
  members: Iterable<Member>,
  joining: ReadonlySet<string>,
  allPods: boolean,
): { cut: { member: Member; deleted: boolean }[]; join: string[] } {
  const all = [...members];
  const byName = new Map(pods.map((p) => [p.metadata?.name ?? '', p]));
  const cut = all
    .filter((m) => m.state === 'up' && podFate(byName.get(m.target.podName), m.target.podUid) === 'gone')
    .map((member) => ({ member, deleted: !byName.has(member.target.podName) }));
  if (!allPods) return { cut, join: [] };
  const memberPods = new Set(all.filter((m) => m.state !== 'gone').map((m) => m.target.podName));
  const join = pods
    .map((pod) => ({ pod, name: pod.metadata?.name ?? '' }))
    .filter(({ pod, name }) => isPodReady(pod) && !memberPods.has(name) && !joining.has(name))
    .map(({ name }) => name);
  return { cut, join };
}
