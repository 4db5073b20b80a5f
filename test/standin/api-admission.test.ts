// Admission webhooks: writes of matching resources reach Validating/MutatingWebhookConfiguration webhooks over TLS
// (Service with caBundle, or url) as AdmissionReview v1 — mutating first, then validating — with timeoutSeconds and
// failurePolicy applied and kube-apiserver's messages, checked with client-node and kubectl.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { AdmissionregistrationV1Api, CoreV1Api, KubeConfig, type V1ValidatingWebhook } from '@kubernetes/client-node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { makeCerts } from '../../standin/certs.js';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { expectStatus, rawRequest } from '../../testkit/api-requests.js';

const runFile = promisify(execFile);
let cluster: ClusterHandle;
let kc: KubeConfig;
let core: CoreV1Api;
let admission: AdmissionregistrationV1Api;
let hookServer: Server;
let hookPort: number;
let caBundle: string;
let dir: string;
/** Every AdmissionReview request the webhook server received, with the path it came on. */
const seen: { path: string; request: any }[] = [];

/** The webhook server: the path says what it answers (allow, deny, add a label, never answer). */
function answer(path: string, request: any): any {
  const base = { uid: request.uid, allowed: true };
  if (path === '/deny' && request.object?.data?.size === 'big')
    return { ...base, allowed: false, status: { code: 403, message: 'size must not be "big"' } };
  if (path === '/deny-delete') return { ...base, allowed: false, status: { message: 'keep it' } };
  if (path === '/mutate') {
    // As with kube-apiserver, a JSON patch cannot add a key to a map that is not there.
    const op = request.object?.metadata?.labels
      ? { op: 'add', path: '/metadata/labels/mutated', value: 'yes' }
      : { op: 'add', path: '/metadata/labels', value: { mutated: 'yes' } };
    return { ...base, patchType: 'JSONPatch', patch: Buffer.from(JSON.stringify([op])).toString('base64') };
  }
  if (path === '/warn') return { ...base, warnings: ['data.size "big" is deprecated', 'a second "note"'] };
  if (path === '/patch-no-type') {
    // A patch whose patchType is left out: VerifyAdmissionResponse refuses the answer.
    const op = { op: 'add', path: '/metadata/labels', value: { untyped: 'yes' } };
    return { ...base, patch: Buffer.from(JSON.stringify([op])).toString('base64') };
  }
  const patchOf = (patch: unknown) => ({
    ...base,
    patchType: 'JSONPatch',
    patch: Buffer.from(JSON.stringify(patch)).toString('base64'),
  });
  // A patch that names a map the object lacks: it does not apply.
  if (path === '/patch-missing') return patchOf([{ op: 'add', path: '/metadata/annotations/x', value: 'y' }]);
  // One operation, not an array of them: json-patch cannot decode it.
  if (path === '/patch-undecodable') return patchOf({ op: 'add', path: '/metadata/labels', value: { x: 'y' } });
  // A patch on a DELETE, which has no object to patch.
  if (path === '/patch-delete') return patchOf([{ op: 'add', path: '/metadata/labels', value: { x: 'y' } }]);
  if (path === '/require-mutated' && request.object?.metadata?.labels?.mutated !== 'yes')
    return { ...base, allowed: false, status: { message: 'not mutated first' } };
  return base;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'devop-admission-'));
  const certs = await makeCerts(dir, ['DNS:hooks.default.svc', 'IP:127.0.0.1']);
  caBundle = Buffer.from(certs.caPem).toString('base64');
  hookServer = createServer({ cert: certs.certPem, key: certs.keyPem }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const review = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      const path = (req.url ?? '').split('?')[0];
      seen.push({ path: req.url ?? '', request: review.request });
      if (path === '/hang') return; // answers never: the API server's timeout decides
      res.setHeader('Content-Type', 'application/json');
      res.end(
        JSON.stringify({
          apiVersion: 'admission.k8s.io/v1',
          kind: 'AdmissionReview',
          response: answer(path, review.request),
        }),
      );
    });
  });
  await new Promise<void>((r) => hookServer.listen(0, '127.0.0.1', () => r()));
  hookPort = (hookServer.address() as { port: number }).port;
  cluster = await startCluster({ kubelet: false });
  kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  core = kc.makeApiClient(CoreV1Api);
  admission = kc.makeApiClient(AdmissionregistrationV1Api);
  await core.createNamespacedService({
    namespace: 'default',
    body: { metadata: { name: 'hooks' }, spec: { ports: [{ name: 'https', port: 443, targetPort: hookPort }] } },
  });
  await core.createNamespacedEndpoints({
    namespace: 'default',
    body: {
      metadata: { name: 'hooks' },
      subsets: [{ addresses: [{ ip: '127.0.0.1' }], ports: [{ name: 'https', port: hookPort }] }],
    },
  });
  await core.createNamespace({ body: { metadata: { name: 'watched', labels: { hooks: 'on' } } } });
});

afterEach(async () => {
  seen.length = 0;
  for (const c of (await admission.listValidatingWebhookConfiguration()).items)
    await admission.deleteValidatingWebhookConfiguration({ name: c.metadata?.name ?? '' });
  for (const c of (await admission.listMutatingWebhookConfiguration()).items)
    await admission.deleteMutatingWebhookConfiguration({ name: c.metadata?.name ?? '' });
});

afterAll(async () => {
  await cluster?.stop();
  hookServer?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** A webhook on configmaps in namespaces labelled hooks=on, reached through the `hooks` Service at `path`. */
function hook(name: string, path: string, more: Partial<V1ValidatingWebhook> = {}): V1ValidatingWebhook {
  return {
    name,
    admissionReviewVersions: ['v1'],
    sideEffects: 'None',
    clientConfig: { service: { namespace: 'default', name: 'hooks', path }, caBundle },
    rules: [{ operations: ['CREATE', 'UPDATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['configmaps'] }],
    namespaceSelector: { matchLabels: { hooks: 'on' } },
    ...more,
  };
}

async function validating(...webhooks: V1ValidatingWebhook[]): Promise<void> {
  await admission.createValidatingWebhookConfiguration({ body: { metadata: { name: 'checks' }, webhooks } });
}

const configMap = (name: string, data: Record<string, string>, labels?: Record<string, string>) => ({
  metadata: { name, labels },
  data,
});

describe('admission webhooks', () => {
  it('a validating webhook refuses a write with its message and lets others through', async () => {
    await validating(hook('size.example.com', '/deny'));
    const refused = await expectStatus(
      core.createNamespacedConfigMap({ namespace: 'watched', body: configMap('big', { size: 'big' }) }),
    );
    expect(refused).toMatchObject({
      code: 403,
      message: 'admission webhook "size.example.com" denied the request: size must not be "big"',
    });
    await core.createNamespacedConfigMap({ namespace: 'watched', body: configMap('small', { size: 'small' }) });
    const review = seen.find((s) => s.request.name === 'small')?.request;
    expect(seen[0].path).toBe('/deny?timeout=10s');
    expect(review).toMatchObject({
      operation: 'CREATE',
      namespace: 'watched',
      kind: { group: '', version: 'v1', kind: 'ConfigMap' },
      resource: { group: '', version: 'v1', resource: 'configmaps' },
      userInfo: { username: 'kubernetes-admin' },
      object: { metadata: { name: 'small', namespace: 'watched' }, data: { size: 'small' } },
      oldObject: null,
      dryRun: false,
    });
    await expectStatus(
      core.replaceNamespacedConfigMap({
        namespace: 'watched',
        name: 'small',
        body: configMap('small', { size: 'big' }),
      }),
    );
    expect(seen.at(-1)?.request).toMatchObject({ operation: 'UPDATE', oldObject: { data: { size: 'small' } } });
    expect((await core.readNamespacedConfigMap({ namespace: 'watched', name: 'small' })).data).toEqual({
      size: 'small',
    });
  });

  it('applies the defaults kube-apiserver applies to a webhook configuration', async () => {
    await validating(hook('size.example.com', '/deny'));
    const [w] = (await admission.readValidatingWebhookConfiguration({ name: 'checks' })).webhooks ?? [];
    expect(w).toMatchObject({
      timeoutSeconds: 10,
      failurePolicy: 'Fail',
      matchPolicy: 'Equivalent',
      objectSelector: {},
    });
    expect(w.clientConfig.service?.port).toBe(443);
    expect(w.rules?.[0].scope).toBe('*');
  });

  it('leaves writes alone that the rules, namespaceSelector or objectSelector do not match', async () => {
    await validating(
      hook('size.example.com', '/deny', { objectSelector: { matchLabels: { checked: 'yes' } } }),
      hook('delete.example.com', '/deny-delete', {
        rules: [{ operations: ['DELETE'], apiGroups: [''], apiVersions: ['v1'], resources: ['secrets'] }],
      }),
    );
    await core.createNamespacedConfigMap({
      namespace: 'default',
      body: configMap('big', { size: 'big' }, { checked: 'yes' }),
    });
    await core.createNamespacedConfigMap({ namespace: 'watched', body: configMap('big', { size: 'big' }) });
    expect(seen).toEqual([]);
    await expectStatus(
      core.createNamespacedConfigMap({
        namespace: 'watched',
        body: configMap('big2', { size: 'big' }, { checked: 'yes' }),
      }),
    );
    await core.createNamespacedSecret({ namespace: 'watched', body: { metadata: { name: 's' } } });
    const refused = await expectStatus(core.deleteNamespacedSecret({ namespace: 'watched', name: 's' }));
    expect(refused).toMatchObject({
      code: 400,
      message: 'admission webhook "delete.example.com" denied the request: keep it',
    });
    expect(seen.at(-1)?.request).toMatchObject({
      operation: 'DELETE',
      object: null,
      oldObject: { metadata: { name: 's' } },
    });
  });

  it('runs mutating webhooks first, stores their JSON patch and shows the result to validating webhooks', async () => {
    await admission.createMutatingWebhookConfiguration({
      body: { metadata: { name: 'labeller' }, webhooks: [hook('label.example.com', '/mutate')] },
    });
    await validating(hook('mutated.example.com', '/require-mutated'));
    await core.createNamespacedConfigMap({ namespace: 'watched', body: configMap('m', { a: '1' }) });
    expect(seen.map((s) => s.path.split('?')[0])).toEqual(['/mutate', '/require-mutated']);
    const stored = await core.readNamespacedConfigMap({ namespace: 'watched', name: 'm' });
    expect(stored.metadata?.labels).toEqual({ mutated: 'yes' });
  });

  // apiserver pkg/admission/plugin/webhook/mutating/dispatcher.go (callAttrMutatingHook): a patch that does not decode
  // is a failed call (ErrCallingWebhook, so failurePolicy applies); one that does not apply, or any patch on a request
  // without an object (DELETE), is apierrors.NewInternalError whatever the policy, in json-patch's words
  // (evanphx/json-patch patch.go, the v4 package apiserver's go.mod pins).
  it("a webhook's patch that does not decode is a failed call; one that does not apply, or patches a DELETE, a 500", async () => {
    const mutating = (name: string, path: string, more: object = {}) =>
      admission.createMutatingWebhookConfiguration({
        body: { metadata: { name }, webhooks: [{ ...hook(`${name}.example.com`, path), ...more }] },
      });
    // Given a webhook whose patch adds under a map the ConfigMap lacks, failing open (failurePolicy Ignore)
    await mutating('missing', '/patch-missing', { failurePolicy: 'Ignore' });
    // When a ConfigMap is created, Then the write fails with json-patch's reason, and nothing is stored
    expect(
      await expectStatus(core.createNamespacedConfigMap({ namespace: 'watched', body: configMap('nopath', {}) })),
    ).toMatchObject({
      code: 500,
      reason: 'InternalError',
      message:
        'Internal error occurred: add operation does not apply: doc is missing path: "/metadata/annotations/x": ' +
        'missing value',
    });
    expect(await expectStatus(core.readNamespacedConfigMap({ namespace: 'watched', name: 'nopath' }))).toMatchObject({
      code: 404,
    });
    await admission.deleteMutatingWebhookConfiguration({ name: 'missing' });

    // Given a webhook whose patch is one operation, not a list (failurePolicy Fail)
    await mutating('undecodable', '/patch-undecodable');
    // Then the write fails as a failed call
    expect(
      await expectStatus(core.createNamespacedConfigMap({ namespace: 'watched', body: configMap('undecoded', {}) })),
    ).toMatchObject({
      code: 500,
      message:
        'Internal error occurred: failed calling webhook "undecodable.example.com": received undecodable patch in ' +
        'webhook response: json: cannot unmarshal object into Go value of type jsonpatch.Patch',
    });
    // And failing open, the write goes through unpatched
    await admission.deleteMutatingWebhookConfiguration({ name: 'undecodable' });
    await mutating('undecodable', '/patch-undecodable', { failurePolicy: 'Ignore' });
    await core.createNamespacedConfigMap({ namespace: 'watched', body: configMap('undecoded', {}) });
    const stored = await core.readNamespacedConfigMap({ namespace: 'watched', name: 'undecoded' });
    expect(stored.metadata?.labels).toBeUndefined();
    await admission.deleteMutatingWebhookConfiguration({ name: 'undecodable' });

    // Given a webhook on deletes that answers with a patch
    const deletes = [{ operations: ['DELETE'], apiGroups: [''], apiVersions: ['v1'], resources: ['configmaps'] }];
    await mutating('ondelete', '/patch-delete', { rules: deletes, failurePolicy: 'Ignore' });
    // When the ConfigMap is deleted, Then the delete fails and the ConfigMap stays
    expect(
      await expectStatus(core.deleteNamespacedConfigMap({ namespace: 'watched', name: 'undecoded' })),
    ).toMatchObject({
      code: 500,
      message:
        'Internal error occurred: admission webhook "ondelete.example.com" attempted to modify the object, which is ' +
        'not supported for this operation',
    });
    await core.readNamespacedConfigMap({ namespace: 'watched', name: 'undecoded' });
  });

  // apiserver pkg/admission/plugin/webhook/mutating/dispatcher.go, reinvocationcontext.go: a webhook with
  // reinvocationPolicy IfNeeded is called once more when a webhook after it changed the object; Never: once.
  it('calls an IfNeeded mutating webhook again once a later webhook patched it (reinvocationPolicy)', async () => {
    const chain = (reinvocationPolicy: string) =>
      admission.createMutatingWebhookConfiguration({
        body: {
          metadata: { name: 'chain' },
          webhooks: [
            { ...hook('observe.example.com', '/observe'), reinvocationPolicy },
            hook('label.example.com', '/mutate'),
          ],
        },
      });
    // Given an IfNeeded webhook before one that adds a label
    await chain('IfNeeded');
    // When a ConfigMap is created
    await core.createNamespacedConfigMap({ namespace: 'watched', body: configMap('again', { a: '1' }) });
    // Then the first is called again and sees the label the second added
    expect(seen.map((s) => s.path.split('?')[0])).toEqual(['/observe', '/mutate', '/observe']);
    expect(seen[0].request.object.metadata.labels).toBeUndefined();
    expect(seen[2].request.object.metadata.labels).toEqual({ mutated: 'yes' });
    // And with the default policy (Never) it is called once
    await admission.deleteMutatingWebhookConfiguration({ name: 'chain' });
    seen.length = 0;
    await chain('Never');
    await core.createNamespacedConfigMap({ namespace: 'watched', body: configMap('once', { a: '1' }) });
    expect(seen.map((s) => s.path.split('?')[0])).toEqual(['/observe', '/mutate']);
  });

  // apiserver pkg/admission/plugin/webhook/request/admissionreview.go VerifyAdmissionResponse: a patch needs
  // patchType JSONPatch, a validating webhook may return none; such an answer is a failed call (failurePolicy).
  it('an answer with a patch but no patchType, or a patch from a validating webhook, is a failed call', async () => {
    // Given a mutating webhook that leaves out patchType (failurePolicy Fail)
    await admission.createMutatingWebhookConfiguration({
      body: { metadata: { name: 'untyped' }, webhooks: [hook('notype.example.com', '/patch-no-type')] },
    });
    // When a ConfigMap is created, Then the write fails with upstream's words and nothing is stored
    const failed = await expectStatus(
      core.createNamespacedConfigMap({ namespace: 'watched', body: configMap('untyped', {}) }),
    );
    expect(failed).toMatchObject({
      code: 500,
      message:
        'Internal error occurred: failed calling webhook "notype.example.com": received invalid webhook response: ' +
        'webhook returned response.patch but not response.patchType',
    });
    // And with failurePolicy Ignore the write goes through unpatched
    await admission.deleteMutatingWebhookConfiguration({ name: 'untyped' });
    await admission.createMutatingWebhookConfiguration({
      body: {
        metadata: { name: 'untyped' },
        webhooks: [hook('notype.example.com', '/patch-no-type', { failurePolicy: 'Ignore' })],
      },
    });
    await core.createNamespacedConfigMap({ namespace: 'watched', body: configMap('untyped', {}) });
    const stored = await core.readNamespacedConfigMap({ namespace: 'watched', name: 'untyped' });
    expect(stored.metadata?.labels).toBeUndefined();
    // And a validating webhook that answers with a patch fails the write
    await admission.deleteMutatingWebhookConfiguration({ name: 'untyped' });
    await validating(hook('patching.example.com', '/mutate'));
    const refused = await expectStatus(
      core.createNamespacedConfigMap({ namespace: 'watched', body: configMap('patched', {}) }),
    );
    expect(refused.message).toBe(
      'Internal error occurred: failed calling webhook "patching.example.com": received invalid webhook response: ' +
        'validating webhook may not return response.patch',
    );
  });

  // apiserver pkg/admission/plugin/webhook/validating/dispatcher.go: each of response.warnings is added to the answer
  // (pkg/warning: `299 - "<text>"`).
  it("passes a webhook's warnings on as Warning headers", async () => {
    // Given a validating webhook that allows with two warnings
    await validating(hook('warner.example.com', '/warn'));
    // When a ConfigMap is created
    const answer = await rawRequest(cluster, cluster.adminToken, 'POST', '/api/v1/namespaces/watched/configmaps', {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'warned' },
      data: { size: 'big' },
    });
    // Then it is created and the client sees both warnings
    expect(answer.status).toBe(201);
    expect(answer.headers.warning).toBe('299 - "data.size \\"big\\" is deprecated", 299 - "a second \\"note\\""');
  });

  it('a webhook that does not answer in timeoutSeconds fails the write (Fail) or is skipped (Ignore)', async () => {
    await validating(hook('slow.example.com', '/hang', { timeoutSeconds: 1 }));
    const started = Date.now();
    const failed = await expectStatus(
      core.createNamespacedConfigMap({ namespace: 'watched', body: configMap('x', {}) }),
    );
    expect(Date.now() - started).toBeGreaterThanOrEqual(950);
    expect(Date.now() - started).toBeLessThan(3000);
    expect(failed).toMatchObject({
      code: 500,
      reason: 'InternalError',
      message:
        'Internal error occurred: failed calling webhook "slow.example.com": failed to call webhook: ' +
        'Post "https://hooks.default.svc:443/hang?timeout=1s": context deadline exceeded',
    });
    await admission.deleteValidatingWebhookConfiguration({ name: 'checks' });
    await validating(hook('slow.example.com', '/hang', { timeoutSeconds: 1, failurePolicy: 'Ignore' }));
    await core.createNamespacedConfigMap({ namespace: 'watched', body: configMap('x', {}) });
  });

  it('reaches a webhook by url, and fails closed on a CA it cannot verify', async () => {
    await validating(
      hook('url.example.com', '/deny', { clientConfig: { url: `https://127.0.0.1:${hookPort}/deny`, caBundle } }),
    );
    const refused = await expectStatus(
      core.createNamespacedConfigMap({ namespace: 'watched', body: configMap('big-url', { size: 'big' }) }),
    );
    expect(refused.message).toBe('admission webhook "url.example.com" denied the request: size must not be "big"');
    expect(seen[0].path).toBe('/deny?timeout=10s');
    await admission.deleteValidatingWebhookConfiguration({ name: 'checks' });
    await validating(
      hook('untrusted.example.com', '/deny', { clientConfig: { service: { namespace: 'default', name: 'hooks' } } }),
    );
    const failed = await expectStatus(
      core.createNamespacedConfigMap({ namespace: 'watched', body: configMap('y', {}) }),
    );
    expect(failed.message).toMatch(
      new RegExp(
        /^Internal error occurred: failed calling webhook "untrusted.example.com": failed to call webhook: /.source +
          /Post "https:\/\/hooks.default.svc:443\/\?timeout=10s": /.source,
      ),
    );
  });

  for (const v of ['1.31', '1.32', '1.33']) {
    it(`kubectl ${v} apply shows the webhook's refusal`, async () => {
      await validating(hook('size.example.com', '/deny'));
      const env = { ...process.env, KUBECONFIG: cluster.kubeconfigPath, HOME: dir };
      const file = join(dir, `big-${v}.yaml`);
      writeFileSync(
        file,
        'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kubectl-big, namespace: watched}\ndata: {size: big}\n',
      );
      const k = `/usr/lib/google-cloud-sdk/bin/kubectl.${v}`;
      const out = await runFile(k, ['apply', '-f', file], { env }).then(
        () => '',
        (e: { stderr: string }) => e.stderr,
      );
      expect(out).toContain('admission webhook "size.example.com" denied the request: size must not be "big"');
      const small = join(dir, `small-${v}.yaml`);
      writeFileSync(
        small,
        'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kubectl-small, namespace: watched}\ndata: {size: small}\n',
      );
      const ok = await runFile(k, ['apply', '-f', small], { env });
      expect(ok.stdout).toMatch(/configmap\/kubectl-small (created|unchanged|configured)/);
      const listed = await runFile(k, ['get', 'validatingwebhookconfigurations'], { env });
      expect(listed.stdout).toMatch(/^NAME\s+.*\nchecks\s+/);
    });
  }
});
