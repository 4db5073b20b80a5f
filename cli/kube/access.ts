// RBAC preflight: asks the API server whether the current user may do what a session needs, so that a missing
// permission is named in one line before anything is created: first the user's rules in each namespace
// (SelfSubjectRulesReview, one call), then a SelfSubjectAccessReview for each check those rules do not allow.
import { AuthorizationV1Api, type KubeConfig, type V1ResourceRule } from '@kubernetes/client-node';
import { UserError } from '../../shared/errors.js';
import { apiCall, apiErrorCode, mapApiError } from './errors.js';

export interface AccessCheck {
  verb: string;
  /** API group ('' for core). */
  group: string;
  resource: string;
  subresource?: string;
  namespace: string;
}

export function describeCheck(check: AccessCheck): string {
  const resource = check.subresource ? `${check.resource}/${check.subresource}` : check.resource;
  return `${check.verb} ${check.group ? `${resource}.${check.group}` : resource}`;
}

/**
 * What a session needs: target lookup, the tunnel, and the agent (a Job, or an ephemeral container) with its token in
 * a Secret (created; read to reuse an agent; an ephemeral agent's deleted when the session ends — a Job's goes with the
 * Job).
 */
export function sessionAccessChecks(input: {
  namespace: string;
  agentNamespace: string;
  ephemeral: boolean;
}): AccessCheck[] {
  const { namespace, agentNamespace } = input;
  const checks: AccessCheck[] = [
    { verb: 'get', group: '', resource: 'pods', namespace },
    { verb: 'list', group: '', resource: 'pods', namespace },
    { verb: 'create', group: '', resource: 'pods', subresource: 'portforward', namespace },
  ];
  if (input.ephemeral) {
    checks.push(
      { verb: 'patch', group: '', resource: 'pods', subresource: 'ephemeralcontainers', namespace },
      { verb: 'create', group: '', resource: 'secrets', namespace },
      { verb: 'get', group: '', resource: 'secrets', namespace },
      { verb: 'delete', group: '', resource: 'secrets', namespace },
    );
  } else {
    checks.push(
      { verb: 'create', group: 'batch', resource: 'jobs', namespace: agentNamespace },
      { verb: 'get', group: 'batch', resource: 'jobs', namespace: agentNamespace },
      { verb: 'delete', group: 'batch', resource: 'jobs', namespace: agentNamespace },
      { verb: 'create', group: '', resource: 'secrets', namespace: agentNamespace },
      { verb: 'get', group: '', resource: 'secrets', namespace: agentNamespace },
    );
    if (agentNamespace !== namespace)
      checks.push({ verb: 'list', group: '', resource: 'pods', namespace: agentNamespace });
  }
  return checks;
}

/**
 * Whether one of the rules a SelfSubjectRulesReview listed allows the check, as the RBAC authorizer matches a rule
 * (kubernetes pkg/apis/rbac/v1/evaluation_helpers.go VerbMatches, APIGroupMatches, ResourceMatches — `*`, the
 * exact resource, or `*\/<subresource>` — and ResourceNameMatches: a rule naming objects allows none of these unnamed
 * checks).
 */
export function rulesAllow(rules: readonly V1ResourceRule[], check: AccessCheck): boolean {
  const resource = check.subresource ? `${check.resource}/${check.subresource}` : check.resource;
  return rules.some(
    (rule) =>
      rule.verbs.some((v) => v === '*' || v === check.verb) &&
      (rule.apiGroups ?? []).some((g) => g === '*' || g === check.group) &&
      (rule.resources ?? []).some(
        (r) => r === '*' || r === resource || (check.subresource !== undefined && r === `*/${check.subresource}`),
      ) &&
      (rule.resourceNames ?? []).length === 0,
  );
}

/**
 * The resource rules that certainly apply to the user in `namespace`, or undefined when the API server cannot list
 * them all (`incomplete`: an authorizer such as a webhook that does not list rules) or answers the review with an
 * error. A server that does not answer at all fails the preflight here, as an access review would, once.
 */
async function rulesIn(api: AuthorizationV1Api, namespace: string): Promise<V1ResourceRule[] | undefined> {
  try {
    const review = await api.createSelfSubjectRulesReview({
      body: { apiVersion: 'authorization.k8s.io/v1', kind: 'SelfSubjectRulesReview', spec: { namespace } },
    });
    return review.status?.incomplete === false ? review.status.resourceRules : undefined;
  } catch (err) {
    if (apiErrorCode(err) !== undefined) return undefined;
    throw mapApiError(err, {
      action: 'check RBAC permissions',
      verb: 'create',
      resource: 'selfsubjectrulesreviews.authorization.k8s.io',
    });
  }
}

/**
 * Returns the checks that are denied. A check the user's listed rules allow is settled by them: for the usual session,
 * one call per namespace instead of a call (and, at devop's start, a TLS connection) per check. Every other check is
 * asked with a SelfSubjectAccessReview, in parallel, and only that answer denies.
 */
export async function deniedChecks(kc: KubeConfig, checks: AccessCheck[]): Promise<AccessCheck[]> {
  const api = kc.makeApiClient(AuthorizationV1Api);
  const namespaces = [...new Set(checks.map((c) => c.namespace))];
  const rules = new Map(await Promise.all(namespaces.map(async (ns) => [ns, await rulesIn(api, ns)] as const)));
  const results = await Promise.all(
    checks.map(async (check) => {
      const listed = rules.get(check.namespace);
      if (listed && rulesAllow(listed, check)) return undefined;
      const review = await apiCall(
        { action: 'check RBAC permissions', verb: 'create', resource: 'selfsubjectaccessreviews.authorization.k8s.io' },
        () =>
          api.createSelfSubjectAccessReview({
            body: {
              apiVersion: 'authorization.k8s.io/v1',
              kind: 'SelfSubjectAccessReview',
              spec: {
                resourceAttributes: {
                  verb: check.verb,
                  group: check.group,
                  resource: check.resource,
                  subresource: check.subresource,
                  namespace: check.namespace,
                },
              },
            },
          }),
      );
      return review.status?.allowed ? undefined : check;
    }),
  );
  return results.filter((c): c is AccessCheck => c !== undefined);
}

/** Throws one UserError naming every missing verb + resource. */
export async function assertAccess(kc: KubeConfig, checks: AccessCheck[], user: string): Promise<void> {
  const denied = await deniedChecks(kc, checks);
  if (denied.length === 0) return;
  const namespaces = [...new Set(denied.map((c) => c.namespace))].join(', ');
  const list = denied.map(describeCheck).join(', ');
  throw new UserError(
    `RBAC: ${user} may not ${list} in namespace ${namespaces}`,
    `ask a cluster admin for a Role granting ${list} in ${namespaces}, or use a --context with more rights`,
  );
}
