// Bearer-token authentication and a static per-token policy (the stand-in's RBAC): who may do which verb on what.
import { randomBytes, randomUUID } from 'node:crypto';
import { ApiError, qualifiedResource } from './errors.js';

export interface PolicyRule {
  verbs: string[];
  apiGroups: string[];
  /** `pods`, `pods/log`, `*`. */
  resources: string[];
  /** Omitted: every namespace and cluster-scoped resources. */
  namespaces?: string[];
}

export interface Identity {
  name: string;
  uid: string;
  groups: string[];
  rules: PolicyRule[];
  /** When the token stops authenticating (ms since the epoch); none: never. */
  expiresAt?: number;
  /** user.Info's Extra: what Impersonate-Extra-<key> headers set (keys lower case, unescaped). */
  extra?: Record<string, string[]>;
}

export interface RequestAttributes {
  verb: string;
  apiGroup: string;
  resource: string;
  subresource?: string;
  namespace?: string;
  name?: string;
}

export const ADMIN_USER = 'kubernetes-admin';
export const RESTRICTED_USER = 'devop-restricted';

/** Everything, everywhere. */
export const ADMIN_RULES: PolicyRule[] = [{ verbs: ['*'], apiGroups: ['*'], resources: ['*'] }];

/**
 * Read-only access to pods (and their logs) and Leases in `default`: no writes, no exec, no port-forward, no jobs. It
 * sees who holds a steal lock (`devop sessions`) but may not delete one.
 */
export const RESTRICTED_RULES: PolicyRule[] = [
  { verbs: ['get', 'list', 'watch'], apiGroups: [''], resources: ['pods', 'pods/log'], namespaces: ['default'] },
  {
    verbs: ['get', 'list', 'watch'],
    apiGroups: ['coordination.k8s.io'],
    resources: ['leases'],
    namespaces: ['default'],
  },
];

/** The stand-in has no RBAC for service accounts: a pod's account may do what the admin may. */
export const SERVICE_ACCOUNT_RULES: PolicyRule[] = ADMIN_RULES;

/** serviceaccount.MakeGroupNames: the groups every service account of a namespace is in. */
export const SERVICE_ACCOUNT_GROUPS = (namespace: string): string[] => [
  'system:serviceaccounts',
  `system:serviceaccounts:${namespace}`,
];

/** What every authenticated user may do (system:basic-user / system:discovery in kube-apiserver). */
const BASIC_RULES: PolicyRule[] = [
  {
    verbs: ['create'],
    apiGroups: ['authorization.k8s.io'],
    resources: ['selfsubjectaccessreviews', 'selfsubjectrulesreviews'],
  },
  { verbs: ['create'], apiGroups: ['authentication.k8s.io'], resources: ['selfsubjectreviews'] },
];

/** What system:discovery and system:public-info-viewer let every user get. */
const DISCOVERY_PATHS = [
  '/api',
  '/api/*',
  '/apis',
  '/apis/*',
  '/version',
  '/openapi/*',
  '/healthz',
  '/livez',
  '/readyz',
];

const matches = (list: string[], v: string) => list.includes('*') || list.includes(v);

export function ruleAllows(rule: PolicyRule, a: RequestAttributes): boolean {
  const res = a.subresource ? `${a.resource}/${a.subresource}` : a.resource;
  if (!matches(rule.verbs, a.verb) || !matches(rule.apiGroups, a.apiGroup)) return false;
  if (!matches(rule.resources, res) && !(a.subresource && rule.resources.includes(`${a.resource}/*`))) return false;
  if (rule.namespaces && !(a.namespace && rule.namespaces.includes(a.namespace))) return false;
  return true;
}

export class Authenticator {
  private readonly tokens = new Map<string, Identity>();
  readonly adminToken: string;
  readonly restrictedToken: string;

  constructor() {
    this.adminToken = this.issue(ADMIN_USER, ['system:masters', 'system:authenticated'], ADMIN_RULES);
    this.restrictedToken = this.issue(RESTRICTED_USER, ['system:authenticated'], RESTRICTED_RULES);
  }

  /** Registers a new token for an identity and returns it. */
  issue(name: string, groups: string[], rules: PolicyRule[], o: { uid?: string; expiresAt?: number } = {}): string {
    const token = randomBytes(24).toString('hex');
    this.tokens.set(token, { name, uid: o.uid ?? randomUUID(), groups, rules, expiresAt: o.expiresAt });
    return token;
  }

  authenticate(authorization: string | undefined): Identity {
    const m = /^Bearer\s+(\S+)$/i.exec(authorization ?? '');
    const id = m ? this.tokens.get(m[1]) : undefined;
    if (!id || (id.expiresAt !== undefined && Date.now() >= id.expiresAt))
      throw new ApiError(401, 'Unauthorized', 'Unauthorized');
    return id;
  }

  /**
   * The identity a request acts as, after its Impersonate-* headers, as k8s.io/apiserver pkg/endpoints/filters/
   * impersonation/impersonation.go decides it: each requested user, group, uid and extra needs the verb "impersonate"
   * on users / groups / serviceaccounts / uids / userextras; groups, uid or extras without a user are a 400. The
   * impersonated identity then has its own permissions (the stand-in's per-user policy), not the requestor's.
   */
  impersonate(requestor: Identity, headers: NodeJS.Dict<string[]>): Identity {
    const user = headers['impersonate-user']?.[0] ?? '';
    const groups = headers['impersonate-group'] ?? [];
    const uid = headers['impersonate-uid']?.[0] ?? '';
    const extras = Object.keys(headers).filter((h) => h.startsWith('impersonate-extra-'));
    if (!user) {
      if (groups.length > 0 || uid || extras.length > 0)
        throw new ApiError(
          400,
          'BadRequest',
          'requested impersonation of groups, uid or extras without impersonating a user',
        );
      return requestor;
    }
    const sa = /^system:serviceaccount:([^:]+):([^:]+)$/.exec(user);
    if (sa)
      this.authorize(requestor, {
        verb: 'impersonate',
        apiGroup: '',
        resource: 'serviceaccounts',
        namespace: sa[1],
        name: sa[2],
      });
    else this.authorize(requestor, { verb: 'impersonate', apiGroup: '', resource: 'users', name: user });
    for (const g of groups)
      this.authorize(requestor, { verb: 'impersonate', apiGroup: '', resource: 'groups', name: g });
    for (const h of extras)
      for (const value of headers[h] ?? [])
        this.authorize(requestor, {
          verb: 'impersonate',
          apiGroup: 'authentication.k8s.io',
          resource: 'userextras',
          subresource: unescapeExtraKey(h.slice('impersonate-extra-'.length)),
          name: value,
        });
    if (uid)
      this.authorize(requestor, {
        verb: 'impersonate',
        apiGroup: 'authentication.k8s.io',
        resource: 'uids',
        name: uid,
      });
    const asGroups = [...(sa && groups.length === 0 ? SERVICE_ACCOUNT_GROUPS(sa[1]) : groups)];
    if (!asGroups.includes('system:authenticated') && !asGroups.includes('system:unauthenticated'))
      asGroups.push('system:authenticated');
    const extra: Record<string, string[]> = {};
    for (const h of extras) extra[unescapeExtraKey(h.slice('impersonate-extra-'.length))] = headers[h] ?? [];
    return { name: user, uid, groups: asGroups, rules: this.rulesOf(user, asGroups), extra };
  }

  /** What RBAC grants a user the stand-in knows by name or group (system:masters: cluster-admin, as kubeadm binds). */
  private rulesOf(name: string, groups: string[]): PolicyRule[] {
    if (groups.includes('system:masters') || name === ADMIN_USER) return ADMIN_RULES;
    if (name.startsWith('system:serviceaccount:')) return SERVICE_ACCOUNT_RULES;
    if (name === RESTRICTED_USER) return RESTRICTED_RULES;
    return [];
  }

  allowed(id: Identity, a: RequestAttributes): boolean {
    return [...BASIC_RULES, ...id.rules].some((r) => ruleAllows(r, a));
  }

  authorize(id: Identity, a: RequestAttributes): void {
    if (this.allowed(id, a)) return;
    const res = a.subresource ? `${a.resource}/${a.subresource}` : a.resource;
    const subject = a.name
      ? `${qualifiedResource(a.apiGroup, a.resource)} "${a.name}"`
      : qualifiedResource(a.apiGroup, a.resource);
    const scope = a.namespace ? `in the namespace "${a.namespace}"` : 'at the cluster scope';
    throw new ApiError(
      403,
      'Forbidden',
      `${subject} is forbidden: User "${id.name}" cannot ${a.verb} resource "${res}" in API group "${a.apiGroup}" ` +
        `${scope}`,
      {
        ...(a.name ? { name: a.name } : {}),
        ...(a.apiGroup ? { group: a.apiGroup } : {}),
        kind: a.resource,
      },
    );
  }

  /**
   * A non-resource request (a path, verb = the lowercased method), as RBAC decides it: every user may get the discovery
   * paths (system:discovery, system:public-info-viewer); cluster-admin's ClusterRole has nonResourceURLs ["*"], which
   * the stand-in grants to identities whose rules allow every verb on every resource everywhere.
   */
  authorizeNonResource(id: Identity, verb: string, path: string): void {
    if (this.allowedNonResource(id, verb, path)) return;
    throw new ApiError(403, 'Forbidden', `forbidden: User "${id.name}" cannot ${verb} path "${path}"`);
  }

  allowedNonResource(id: Identity, verb: string, path: string): boolean {
    const everything = id.rules.some(
      (r) => !r.namespaces && r.verbs.includes('*') && r.apiGroups.includes('*') && r.resources.includes('*'),
    );
    const discovery =
      verb === 'get' && DISCOVERY_PATHS.some((p) => (p.endsWith('*') ? path.startsWith(p.slice(0, -1)) : path === p));
    return everything || discovery;
  }

  /**
   * SelfSubjectRulesReview status for one namespace; none is a 400 (kubernetes pkg/registry/authorization/
   * selfsubjectrulesreview/rest.go).
   */
  rulesFor(
    id: Identity,
    namespace: string,
  ): { resourceRules: object[]; nonResourceRules: object[]; incomplete: boolean } {
    if (!namespace) throw new ApiError(400, 'BadRequest', 'no namespace on request');
    const resourceRules = [...BASIC_RULES, ...id.rules]
      .filter((r) => !r.namespaces || r.namespaces.includes(namespace))
      .map((r) => ({ verbs: r.verbs, apiGroups: r.apiGroups, resources: r.resources }));
    return {
      resourceRules,
      nonResourceRules: [
        { verbs: ['get'], nonResourceURLs: DISCOVERY_PATHS },
        ...(this.allowedNonResource(id, '*', '*') ? [{ verbs: ['*'], nonResourceURLs: ['*'] }] : []),
      ],
      incomplete: false,
    };
  }
}

/** impersonation.go unescapeExtraKey: the key %-unescaped, or as sent when that fails. */
function unescapeExtraKey(encoded: string): string {
  try {
    return decodeURIComponent(encoded);
  } catch {
    return encoded;
  }
}
