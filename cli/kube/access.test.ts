// The RBAC preflight: rules listed by a SelfSubjectRulesReview settle what they allow, as the RBAC authorizer matches
// a rule (kubernetes pkg/apis/rbac/v1/evaluation_helpers.go); everything else is a SelfSubjectAccessReview, which alone
// denies. Against the stand-in's API server, with its admin and its restricted user.
import { AuthorizationV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { type AccessCheck, deniedChecks, rulesAllow, sessionAccessChecks } from './access.js';

const check = (verb: string, group: string, resource: string, subresource?: string): AccessCheck => ({
  verb,
  group,
  resource,
  ...(subresource ? { subresource } : {}),
  namespace: 'default',
});

describe('rulesAllow (evaluation_helpers.go)', () => {
  const portForward = check('create', '', 'pods', 'portforward');

  it('Given a rule for everything, Then it allows any check, subresources included', () => {
    expect(rulesAllow([{ verbs: ['*'], apiGroups: ['*'], resources: ['*'] }], portForward)).toBe(true);
  });

  it('Given a rule naming the subresource exactly, or */subresource, Then it allows it; the parent alone does not', () => {
    expect(rulesAllow([{ verbs: ['create'], apiGroups: [''], resources: ['pods/portforward'] }], portForward)).toBe(
      true,
    );
    expect(rulesAllow([{ verbs: ['create'], apiGroups: [''], resources: ['*/portforward'] }], portForward)).toBe(true);
    expect(rulesAllow([{ verbs: ['create'], apiGroups: [''], resources: ['pods'] }], portForward)).toBe(false);
    // pods/* is no wildcard in RBAC: it names a subresource called "*"
    expect(rulesAllow([{ verbs: ['create'], apiGroups: [''], resources: ['pods/*'] }], portForward)).toBe(false);
  });

  it('Given a rule of another verb or group, or one naming objects, Then it does not allow the unnamed check', () => {
    const jobs = check('create', 'batch', 'jobs');
    expect(rulesAllow([{ verbs: ['get', 'list'], apiGroups: ['batch'], resources: ['jobs'] }], jobs)).toBe(false);
    expect(rulesAllow([{ verbs: ['create'], apiGroups: [''], resources: ['jobs'] }], jobs)).toBe(false);
    expect(
      rulesAllow([{ verbs: ['create'], apiGroups: ['batch'], resources: ['jobs'], resourceNames: ['a'] }], jobs),
    ).toBe(false);
    expect(rulesAllow([{ verbs: ['*'], apiGroups: ['*'], resources: ['jobs'] }], jobs)).toBe(true);
  });
});

describe('deniedChecks against the API server', () => {
  let cluster: ClusterHandle;
  const kubeconfig = (path: string): KubeConfig => {
    const kc = new KubeConfig();
    kc.loadFromFile(path);
    return kc;
  };
  const checks = sessionAccessChecks({ namespace: 'default', agentNamespace: 'default', ephemeral: false });

  beforeAll(async () => {
    cluster = await startCluster({ kubelet: false });
  });
  afterAll(async () => {
    await cluster?.stop();
  });
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('Given a user whose rules allow a session, When devop checks, Then one rules review answers, no access review', async () => {
    const reviews = vi.spyOn(AuthorizationV1Api.prototype, 'createSelfSubjectAccessReview');
    expect(await deniedChecks(kubeconfig(cluster.kubeconfigPath), checks)).toEqual([]);
    expect(reviews).not.toHaveBeenCalled();
  });

  it('Given a restricted user, Then what its rules allow is settled, and each other check is denied by an access review', async () => {
    const reviews = vi.spyOn(AuthorizationV1Api.prototype, 'createSelfSubjectAccessReview');
    const denied = await deniedChecks(kubeconfig(cluster.restrictedKubeconfigPath), checks);
    // It may get and list pods (its rules), and nothing else a session needs
    const allowed = checks.filter((c) => !denied.includes(c));
    expect(allowed.map((c) => `${c.verb} ${c.resource}`)).toEqual(['get pods', 'list pods']);
    expect(reviews).toHaveBeenCalledTimes(denied.length);
  });

  it('Given an API server that does not answer, Then the preflight fails once, with the line that says so', async () => {
    // A server that does not answer costs its timeout: asking again with access reviews would double the wait.
    const reviews = vi.spyOn(AuthorizationV1Api.prototype, 'createSelfSubjectAccessReview');
    const nowhere = new KubeConfig();
    nowhere.loadFromOptions({
      clusters: [{ name: 'c', server: 'https://127.0.0.1:1', skipTLSVerify: false }],
      users: [{ name: 'u', token: 'x' }],
      contexts: [{ name: 'c', cluster: 'c', user: 'u' }],
      currentContext: 'c',
    });
    await expect(deniedChecks(nowhere, checks)).rejects.toThrow(
      'cannot reach the Kubernetes API server (ECONNREFUSED) while trying to check RBAC permissions',
    );
    expect(reviews).not.toHaveBeenCalled();
  });

  it('Given rules the server cannot list completely, Then every check is asked with an access review', async () => {
    vi.spyOn(AuthorizationV1Api.prototype, 'createSelfSubjectRulesReview').mockResolvedValue({
      spec: { namespace: 'default' },
      status: {
        incomplete: true,
        resourceRules: [{ verbs: ['*'], apiGroups: ['*'], resources: ['*'] }],
        nonResourceRules: [],
      },
    });
    const reviews = vi.spyOn(AuthorizationV1Api.prototype, 'createSelfSubjectAccessReview');
    expect(await deniedChecks(kubeconfig(cluster.restrictedKubeconfigPath), checks)).toHaveLength(checks.length - 2);
    expect(reviews).toHaveBeenCalledTimes(checks.length);
  });
});
