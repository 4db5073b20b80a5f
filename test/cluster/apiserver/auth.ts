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

/** Read-only access to pods (and their logs) in `default`: no writes, no exec, no port-forward, no jobs. */
export const RESTRICTED_RULES: PolicyRule[] = [
  { verbs: ['get', 'list', 'watch'], apiGroups: [''], resources: ['pods', 'pods/log'], namespaces: ['default'] },
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
    const everything = id.rules.some(
      (r) => !r.namespaces && r.verbs.includes('*') && r.apiGroups.includes('*') && r.resources.includes('*'),
    );
    const discovery =
      verb === 'get' && DISCOVERY_PATHS.some((p) => (p.endsWith('*') ? path.startsWith(p.slice(0, -1)) : path === p));
    if (everything || discovery) return;
    throw new ApiError(403, 'Forbidden', `forbidden: User "${id.name}" cannot ${verb} path "${path}"`);
  }

  /** SelfSubjectRulesReview status for one namespace. */
  rulesFor(
    id: Identity,
    namespace: string,
  ): { resourceRules: object[]; nonResourceRules: object[]; incomplete: boolean } {
    const resourceRules = [...BASIC_RULES, ...id.rules]
      .filter((r) => !r.namespaces || r.namespaces.includes(namespace))
      .map((r) => ({ verbs: r.verbs, apiGroups: r.apiGroups, resources: r.resources }));
    return {
      resourceRules,
      nonResourceRules: [
        { verbs: ['get'], nonResourceURLs: ['/api', '/api/*', '/apis', '/apis/*', '/version', '/openapi/*'] },
      ],
      incomplete: false,
    };
  }
}
