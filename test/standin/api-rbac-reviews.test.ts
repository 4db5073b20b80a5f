// RBAC answers: SelfSubjectAccessReview (what devop asks before it acts: cli/kube/access.ts) and
// SelfSubjectRulesReview (kubectl auth can-i --list), for the admin and the restricted user, over plain HTTPS and
// kubectl. Upstream: kubernetes pkg/registry/authorization/selfsubjectaccessreview/rest.go,
// selfsubjectrulesreview/rest.go and plugin/pkg/auth/authorizer/rbac/rbac.go (non-resource URLs included).
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { rawRequest } from '../../testkit/api-requests.js';

const run = promisify(execFile);
let cluster: ClusterHandle;
let home: string;

beforeAll(async () => {
  home = mkdtempSync(join(tmpdir(), 'devop-rbac-'));
  cluster = await startCluster({ kubelet: false });
});

afterAll(async () => {
  await cluster?.stop();
  rmSync(home, { recursive: true, force: true });
});

/** status.allowed of a SelfSubjectAccessReview with these attributes, asked with `token`. */
async function canI(token: string, spec: object): Promise<boolean> {
  const answer = await rawRequest(cluster, token, 'POST', '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews', {
    apiVersion: 'authorization.k8s.io/v1',
    kind: 'SelfSubjectAccessReview',
    spec,
  });
  expect(answer.status).toBe(201);
  return answer.body.status.allowed;
}

async function rules(token: string, spec: object) {
  return rawRequest(cluster, token, 'POST', '/apis/authorization.k8s.io/v1/selfsubjectrulesreviews', {
    apiVersion: 'authorization.k8s.io/v1',
    kind: 'SelfSubjectRulesReview',
    spec,
  });
}

describe('SelfSubjectAccessReview', () => {
  it('answers resource attributes by the user’s RBAC: subresources and namespaces count', async () => {
    // Given the admin and the restricted user (read-only pods and pods/log in default)
    const restricted = cluster.restrictedToken;
    // When each asks about what devop needs, Then the answers follow their rules
    expect(
      await canI(cluster.adminToken, {
        resourceAttributes: { verb: 'create', resource: 'pods', subresource: 'exec', namespace: 'default' },
      }),
    ).toBe(true);
    expect(
      await canI(restricted, { resourceAttributes: { verb: 'list', resource: 'pods', namespace: 'default' } }),
    ).toBe(true);
    expect(
      await canI(restricted, {
        resourceAttributes: { verb: 'get', resource: 'pods', subresource: 'log', namespace: 'default' },
      }),
    ).toBe(true);
    expect(
      await canI(restricted, {
        resourceAttributes: { verb: 'create', resource: 'pods', subresource: 'portforward', namespace: 'default' },
      }),
    ).toBe(false);
    expect(
      await canI(restricted, { resourceAttributes: { verb: 'list', resource: 'pods', namespace: 'kube-system' } }),
    ).toBe(false);
    expect(
      await canI(restricted, {
        resourceAttributes: { verb: 'patch', group: 'apps', resource: 'deployments', namespace: 'default' },
      }),
    ).toBe(false);
  });

  it('answers non-resource attributes by RBAC too: discovery for everyone, other paths for the admin only', async () => {
    // Given the restricted user, When it asks about a discovery path, Then it may (system:discovery)
    expect(await canI(cluster.restrictedToken, { nonResourceAttributes: { verb: 'get', path: '/version' } })).toBe(
      true,
    );
    // When it asks to set the log verbosity, Then it may not; the admin may
    expect(
      await canI(cluster.restrictedToken, { nonResourceAttributes: { verb: 'put', path: '/debug/flags/v' } }),
    ).toBe(false);
    expect(await canI(cluster.adminToken, { nonResourceAttributes: { verb: 'put', path: '/debug/flags/v' } })).toBe(
      true,
    );
  });
});

describe('SelfSubjectRulesReview', () => {
  it('lists the rules that apply in the namespace asked for; no namespace is a 400', async () => {
    // Given the restricted user, When it asks for its rules in default, Then its pod rule is there
    const inDefault = await rules(cluster.restrictedToken, { namespace: 'default' });
    expect(inDefault.status).toBe(201);
    expect(inDefault.body.status.incomplete).toBe(false);
    expect(inDefault.body.status.resourceRules).toContainEqual({
      verbs: ['get', 'list', 'watch'],
      apiGroups: [''],
      resources: ['pods', 'pods/log'],
    });
    expect(inDefault.body.status.nonResourceRules).toContainEqual(
      expect.objectContaining({ verbs: ['get'], nonResourceURLs: expect.arrayContaining(['/api', '/version']) }),
    );
    // And in kube-system it is not
    const elsewhere = await rules(cluster.restrictedToken, { namespace: 'kube-system' });
    expect(JSON.stringify(elsewhere.body.status.resourceRules)).not.toContain('"pods"');
    // And the admin has every non-resource URL
    const admin = await rules(cluster.adminToken, { namespace: 'default' });
    expect(admin.body.status.nonResourceRules).toContainEqual({ verbs: ['*'], nonResourceURLs: ['*'] });
    // When no namespace is given, Then it is kube-apiserver's 400
    const none = await rules(cluster.restrictedToken, {});
    expect(none.status).toBe(400);
    expect(none.body.message).toBe('no namespace on request');
  });

  it('kubectl 1.33 auth can-i --list shows the restricted user’s rules', async () => {
    const env = { ...process.env, KUBECONFIG: cluster.restrictedKubeconfigPath, HOME: home };
    const out = await run('/usr/lib/google-cloud-sdk/bin/kubectl.1.33', ['auth', 'can-i', '--list', '-n', 'default'], {
      env,
    });
    expect(out.stdout).toMatch(/^pods\s+\[\]\s+\[\]\s+\[get list watch\]$/m);
    expect(out.stdout).toMatch(/^\s+\[\/version\]\s+\[\]\s+\[get\]$/m);
  });
});
