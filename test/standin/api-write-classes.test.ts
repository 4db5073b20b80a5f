// Write classes that a dry run does not cover, served by the stand-in as kube-apiserver serves them: the TokenRequest
// subresource (mints under dryRun=All), paths split after decoding (%2F), the /debug/flags/v non-resource write, and
// Impersonate-* headers. Each case cites the upstream file it follows.
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { rawRequest } from '../../testkit/api-requests.js';

const run = promisify(execFile);
let cluster: ClusterHandle;
let core: CoreV1Api;
const namespace = 'default';
const ns = `/api/v1/namespaces/${namespace}`;

beforeAll(async () => {
  cluster = await startCluster({ kubelet: false });
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  core = kc.makeApiClient(CoreV1Api);
});

afterAll(async () => {
  await cluster?.stop();
});

const admin = (method: string, path: string, body?: string | object, headers?: Record<string, string | string[]>) =>
  rawRequest(cluster, cluster.adminToken, method, path, body, headers);

/** Who the API server takes the bearer of `token` for (SelfSubjectReview). */
async function whoIs(token: string): Promise<{ status: number; username?: string; uid?: string; groups?: string[] }> {
  const answer = await rawRequest(cluster, token, 'POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews', {
    apiVersion: 'authentication.k8s.io/v1',
    kind: 'SelfSubjectReview',
  });
  return { status: answer.status, ...(answer.body?.status?.userInfo ?? {}) };
}

describe('serviceaccounts/NAME/token (kubernetes pkg/registry/core/serviceaccount/storage/token.go)', () => {
  it('dryRun=All still mints a real token, which authenticates as the service account', async () => {
    // Given a service account
    const account = await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name: 'minted' } } });
    // When a token is requested with dryRun=All (token.go never reads the CreateOptions' dryRun)
    const answer = await admin('POST', `${ns}/serviceaccounts/minted/token?dryRun=All`, {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'TokenRequest',
      spec: { expirationSeconds: 600 },
    });
    // Then the answer carries a token bound to the account
    expect(answer.status).toBe(201);
    expect(answer.body.kind).toBe('TokenRequest');
    expect(answer.body.metadata).toMatchObject({ name: 'minted', namespace, uid: account.metadata?.uid });
    expect(answer.body.spec.audiences).toEqual(['https://kubernetes.default.svc.cluster.local']);
    const token: string = answer.body.status.token;
    expect(token).toBeTruthy();
    // And the API server takes that token for the service account: the dry run handed out a working credential
    expect(await whoIs(token)).toMatchObject({
      status: 201,
      username: 'system:serviceaccount:default:minted',
      uid: account.metadata?.uid,
      groups: expect.arrayContaining(['system:serviceaccounts', 'system:serviceaccounts:default']),
    });
  });

  it('is validated as ValidateTokenRequest does (422), refused without the create verb (403)', async () => {
    await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name: 'checked' } } });
    const short = await admin('POST', `${ns}/serviceaccounts/checked/token`, { spec: { expirationSeconds: 60 } });
    expect([short.status, short.body.message]).toEqual([422, expect.stringMatching(/less than 10 minutes/)]);
    const otherName = await admin('POST', `${ns}/serviceaccounts/checked/token`, { metadata: { name: 'someone' } });
    expect([otherName.status, otherName.body.message]).toEqual([422, expect.stringMatching(/must match the service/)]);
    const restricted = await rawRequest(
      cluster,
      cluster.restrictedToken,
      'POST',
      `${ns}/serviceaccounts/checked/token`,
      {
        spec: {},
      },
    );
    expect(restricted.status).toBe(403);
    expect(restricted.body.message).toMatch(/cannot create resource "serviceaccounts\/token"/);
    const missing = await admin('POST', `${ns}/serviceaccounts/nobody/token`, { spec: {} });
    expect(missing.status).toBe(404);
  });
});

describe('paths are split after decoding (k8s.io/apiserver pkg/endpoints/request/requestinfo.go splits URL.Path)', () => {
  it('pods/p%2Fexec is the exec subresource of pod p, authorized as pods/exec', async () => {
    // Given a pod, and a user who may read pods but not exec into them
    await core.createNamespacedPod({
      namespace,
      body: { metadata: { name: 'p' }, spec: { containers: [{ name: 'c', image: 'busybox' }] } },
    });
    // When the subresource's slash is sent encoded
    const exec = await admin('POST', `${ns}/pods/p%2Fexec?command=true&stdout=true`);
    const status = await admin('GET', `${ns}/pods/p%2Fstatus`);
    const restricted = await rawRequest(cluster, cluster.restrictedToken, 'GET', `${ns}/pods/p%2Fexec?command=true`);
    // Then the API server took it as the subresource: exec wants an upgrade, status answers the pod
    expect([exec.status, exec.body.message]).toEqual([400, 'Upgrade request required']);
    expect([status.status, status.body.metadata?.name]).toEqual([200, 'p']);
    // And authorization saw pods/exec, which the restricted user may not use, rather than a pod named "p/exec"
    expect(restricted.status).toBe(403);
    expect(restricted.body.message).toMatch(/cannot (get|create) resource "pods\/exec"/);
  });

  it('a broken escape is a bad request', async () => {
    expect((await admin('GET', `${ns}/pods/p%zz`)).status).toBe(400);
  });
});

describe('PUT /debug/flags/v (k8s.io/apiserver pkg/server/routes/flags.go, installed with --profiling)', () => {
  const restricted = (method: string, path: string, body?: string) =>
    rawRequest(cluster, cluster.restrictedToken, method, path, body, { 'content-type': 'text/plain' });

  it('an authorized user sets the log verbosity; a user without the non-resource verb gets 403', async () => {
    // When the admin puts a new level (the body is the value, as StringFlagPutHandler reads it)
    const set = await admin('PUT', '/debug/flags/v', '4', { 'content-type': 'text/plain' });
    // Then the level changed and the answer is klog's line in plain text
    expect([set.status, set.text]).toEqual([200, 'successfully set klog.logging.verbosity to 4\n']);
    expect(cluster.controlPlane.api.logVerbosity()).toBe('4');
    // And a user whose RBAC has no "put" on that path is refused before anything changes
    const denied = await restricted('PUT', '/debug/flags/v', '9');
    expect([denied.status, denied.body?.message]).toEqual([
      403,
      'forbidden: User "devop-restricted" cannot put path "/debug/flags/v"',
    ]);
    expect(cluster.controlPlane.api.logVerbosity()).toBe('4');
  });

  it('only PUT sets it (406 otherwise), and a value klog cannot parse is a 400', async () => {
    const get = await admin('GET', '/debug/flags/v');
    expect([get.status, get.text]).toEqual([406, 'unsupported http method\n']);
    const bad = await admin('PUT', '/debug/flags/v', 'loud', { 'content-type': 'text/plain' });
    expect(bad.status).toBe(400);
    expect(bad.text).toMatch(/failed set klog.logging.verbosity loud: strconv.ParseInt/);
  });

  it('kubectl 1.33 replace --raw /debug/flags/v sets it, as on a real cluster', async () => {
    const file = join(cluster.caPath, '..', 'verbosity');
    writeFileSync(file, '6');
    const { stdout } = await run('kubectl', [
      '--kubeconfig',
      cluster.kubeconfigPath,
      'replace',
      '--raw',
      '/debug/flags/v',
      '-f',
      file,
    ]);
    expect(stdout).toMatch(/successfully set klog.logging.verbosity to 6/);
    expect(cluster.controlPlane.api.logVerbosity()).toBe('6');
  });
});

describe('Impersonate-* headers (k8s.io/apiserver pkg/endpoints/filters/impersonation/impersonation.go)', () => {
  const as = (
    token: string,
    headers: Record<string, string | string[]>,
    method = 'POST',
    path?: string,
    body?: object,
  ) =>
    rawRequest(
      cluster,
      token,
      method,
      path ?? '/apis/authentication.k8s.io/v1/selfsubjectreviews',
      body ?? { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
      headers,
    );

  it('the admin may impersonate: the request then acts as that user, with that user’s permissions', async () => {
    // When the admin impersonates the restricted user
    const who = await as(cluster.adminToken, { 'impersonate-user': 'devop-restricted' });
    // Then the API server takes the request for that user
    expect(who.body.status.userInfo).toMatchObject({ username: 'devop-restricted', groups: ['system:authenticated'] });
    // And a write is decided by that user's permissions, not the admin's
    const write = await as(cluster.adminToken, { 'impersonate-user': 'devop-restricted' }, 'POST', `${ns}/configmaps`, {
      metadata: { name: 'as-restricted' },
    });
    expect([write.status, write.body.message]).toEqual([
      403,
      expect.stringMatching(/User "devop-restricted" cannot create resource "configmaps"/),
    ]);
    // And groups are taken as given, with system:authenticated added
    const withGroups = await as(cluster.adminToken, {
      'impersonate-user': 'alice',
      'impersonate-group': ['system:masters', 'team-a'],
    });
    expect(withGroups.body.status.userInfo).toMatchObject({
      username: 'alice',
      groups: ['system:masters', 'team-a', 'system:authenticated'],
    });
    // And a service account gets its namespace's groups
    const account = await as(cluster.adminToken, { 'impersonate-user': 'system:serviceaccount:default:builder' });
    expect(account.body.status.userInfo.groups).toEqual([
      'system:serviceaccounts',
      'system:serviceaccounts:default',
      'system:authenticated',
    ]);
  });

  it('a user without the impersonate verb is refused (403), groups without a user are a 400', async () => {
    const denied = await as(cluster.restrictedToken, { 'impersonate-user': 'kubernetes-admin' });
    expect([denied.status, denied.body.message]).toEqual([
      403,
      'users "kubernetes-admin" is forbidden: User "devop-restricted" cannot impersonate resource "users" in API ' +
        'group "" at the cluster scope',
    ]);
    const groupOnly = await as(cluster.adminToken, { 'impersonate-group': 'system:masters' });
    expect(groupOnly.status).toBe(400);
  });

  it('kubectl 1.33 --as and --as-group send the headers the same way', async () => {
    const kubectl = (...args: string[]) => run('kubectl', ['--kubeconfig', cluster.kubeconfigPath, ...args]);
    const refused = await kubectl('--as', 'devop-restricted', 'create', 'configmap', 'kubectl-as').catch((e) => e);
    expect(String(refused.stderr)).toMatch(/User "devop-restricted" cannot create resource "configmaps"/);
    const { stdout } = await kubectl('--as', 'alice', '--as-group', 'system:masters', 'auth', 'whoami', '-o', 'json');
    expect(JSON.parse(stdout).status.userInfo).toMatchObject({ username: 'alice' });
  });
});

describe('nodes/NAME/proxy (kube-apiserver dials the kubelet: kubernetes pkg/registry/core/node/rest/proxy.go)', () => {
  it('is not served by the stand-in, whose kubelet has no HTTPS port: a 503 that says so, never a 404', async () => {
    const answer = await admin('POST', `/api/v1/nodes/${cluster.nodeName}/proxy/run/default/p/c?cmd=id`);
    expect([answer.status, answer.body.message]).toEqual([
      503,
      expect.stringMatching(/nodes\/NAME\/proxy is not served/),
    ]);
  });
});
