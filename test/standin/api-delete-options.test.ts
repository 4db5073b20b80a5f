// Where a DELETE's options come from, and which dryRun values are accepted, as kube-apiserver does it:
// k8s.io/apiserver pkg/endpoints/handlers/delete.go (DeleteResource and DeleteCollection) decodes DeleteOptions from
// the body when the request has any body bytes and reads the query only when it has none; the body decodes under any
// apiVersion (apimachinery pkg/apis/meta/internalversion/register.go registers DeleteOptions unversioned), a field of
// the wrong type or bytes that do not decode are a 400; preconditions exist only in the body (the query conversion in
// pkg/apis/meta/v1/zz_generated.conversion.go opts them out). Every write handler (create.go, update.go, patch.go,
// delete.go) refuses a dryRun other than "All" through apimachinery pkg/apis/meta/v1/validation ValidateDryRun with
// errors.NewInvalid: a 422, not a 400. Checked with clients nobody here wrote: kubectl 1.33 and python3-kubernetes.
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { request } from 'node:https';
import { promisify } from 'node:util';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';

const run = promisify(execFile);
const PYTHON = '/usr/bin/python3';
const namespace = 'default';

let cluster: ClusterHandle;
let core: CoreV1Api;

beforeAll(async () => {
  cluster = await startCluster({ kubelet: false });
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  core = kc.makeApiClient(CoreV1Api);
});

afterAll(async () => {
  await cluster?.stop();
});

interface Answer {
  status: number;
  body: { kind?: string; reason?: string; message?: string; metadata?: { name?: string } };
}

/** One request as the admin, with exactly the body given (a DELETE with a body announces its length). */
function send(method: string, path: string, body?: unknown): Promise<Answer> {
  return sendText(method, path, body === undefined ? undefined : JSON.stringify(body));
}

/** One request as the admin with these exact body bytes (JSON content type). */
function sendText(method: string, path: string, text: string | undefined): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${cluster.server}${path}`,
      {
        method,
        ca: readFileSync(cluster.caPath),
        headers: {
          authorization: `Bearer ${cluster.adminToken}`,
          accept: 'application/json',
          ...(text === undefined
            ? {}
            : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString()) }),
        );
      },
    );
    req.on('error', reject);
    req.end(text);
  });
}

const configMaps = `/api/v1/namespaces/${namespace}/configmaps`;
const exists = async (name: string): Promise<boolean> => (await send('GET', `${configMaps}/${name}`)).status === 200;
const makeConfigMap = async (name: string): Promise<void> => {
  await core.createNamespacedConfigMap({ namespace, body: { metadata: { name }, data: { a: '1' } } });
};

describe('stand-in API: DELETE options come from the body when there is one (handlers/delete.go)', () => {
  it('a body with dryRun All is a dry run, whatever the query says', async () => {
    // Given a ConfigMap
    await makeConfigMap('body-dry');
    // When it is deleted with dryRun in the body and none in the query
    const answer = await send('DELETE', `${configMaps}/body-dry`, {
      kind: 'DeleteOptions',
      apiVersion: 'v1',
      dryRun: ['All'],
    });
    // Then the answer is a success and the object is still there
    expect(answer.status).toBe(200);
    expect(await exists('body-dry')).toBe(true);
  });

  it('a body without dryRun is a real delete even when the query says dryRun=All', async () => {
    // Given a ConfigMap
    await makeConfigMap('query-ignored');
    // When the query asks for a dry run but the body (as client-go and kubectl always send one) does not
    const answer = await send('DELETE', `${configMaps}/query-ignored?dryRun=All`, {
      kind: 'DeleteOptions',
      apiVersion: 'meta.k8s.io/v1',
      propagationPolicy: 'Background',
    });
    // Then kube-apiserver has read the body only: the object is gone
    expect(answer.status).toBe(200);
    expect(await exists('query-ignored')).toBe(false);
  });

  it('without a body the query is read', async () => {
    await makeConfigMap('query-dry');
    expect((await send('DELETE', `${configMaps}/query-dry?dryRun=All`)).status).toBe(200);
    expect(await exists('query-dry')).toBe(true);
  });

  it('DELETE collection reads its body the same way', async () => {
    // Given two labelled ConfigMaps
    for (const name of ['coll-a', 'coll-b'])
      await core.createNamespacedConfigMap({ namespace, body: { metadata: { name, labels: { set: 'coll' } } } });
    // When the collection is deleted with dryRun in the body
    const dry = await send('DELETE', `${configMaps}?labelSelector=set%3Dcoll`, {
      kind: 'DeleteOptions',
      dryRun: ['All'],
    });
    expect(dry.status).toBe(200);
    expect(await exists('coll-a')).toBe(true);
    // And with dryRun only in the query beside a body: a real delete
    await send('DELETE', `${configMaps}?labelSelector=set%3Dcoll&dryRun=All`, { kind: 'DeleteOptions' });
    expect(await exists('coll-a')).toBe(false);
    expect(await exists('coll-b')).toBe(false);
  });

  it('a body that is not DeleteOptions is refused (400), nothing deleted', async () => {
    await makeConfigMap('wrong-kind');
    const answer = await send('DELETE', `${configMaps}/wrong-kind`, { kind: 'ConfigMap', apiVersion: 'v1' });
    expect(answer.status).toBe(400);
    expect(await exists('wrong-kind')).toBe(true);
  });
});

describe('stand-in API: a DELETE body is decoded and validated as DeleteOptions (handlers/delete.go)', () => {
  it('preconditions come from the body: a uid or resourceVersion that differs is a 409 and nothing is deleted', async () => {
    // Given a ConfigMap
    await makeConfigMap('preconditioned');
    const stored = await core.readNamespacedConfigMap({ name: 'preconditioned', namespace });
    // When it is deleted with preconditions that do not match
    const byUid = await send('DELETE', `${configMaps}/preconditioned`, {
      kind: 'DeleteOptions',
      apiVersion: 'v1',
      preconditions: { uid: 'not-its-uid' },
    });
    const byVersion = await send('DELETE', `${configMaps}/preconditioned`, {
      kind: 'DeleteOptions',
      preconditions: { resourceVersion: '1' },
    });
    // Then both are conflicts and the object stays
    expect([byUid.status, byUid.body.reason]).toEqual([409, 'Conflict']);
    // The message names the kind, as apiserver pkg/registry/rest/delete.go BeforeDelete words it
    expect(byUid.body.message).toBe(
      `Operation cannot be fulfilled on ConfigMap "preconditioned": the UID in the precondition (not-its-uid) does ` +
        `not match the UID in record (${stored.metadata?.uid}). The object might have been deleted and then recreated`,
    );
    expect([byVersion.status, byVersion.body.reason]).toEqual([409, 'Conflict']);
    expect(await exists('preconditioned')).toBe(true);
    // And with the object's own uid the delete happens
    const matching = await send('DELETE', `${configMaps}/preconditioned`, {
      kind: 'DeleteOptions',
      preconditions: { uid: stored.metadata?.uid },
    });
    expect(matching.status).toBe(200);
    expect(await exists('preconditioned')).toBe(false);
  });

  it('with a body the query is not read at all: a bad query value beside a good body is not seen', async () => {
    await makeConfigMap('query-unread');
    const answer = await send(
      'DELETE',
      `${configMaps}/query-unread?dryRun=Bogus&propagationPolicy=Sideways&gracePeriodSeconds=soon`,
      { kind: 'DeleteOptions', dryRun: ['All'] },
    );
    expect(answer.status).toBe(200);
    expect(await exists('query-unread')).toBe(true);
  });

  it('a body of whitespace or broken JSON is a 400, not "no body": the query dryRun is not taken', async () => {
    // Given a ConfigMap
    await makeConfigMap('blank-body');
    // When it is deleted with dryRun=All in the query and a body that is not empty but does not decode
    const blank = await sendText('DELETE', `${configMaps}/blank-body?dryRun=All`, '  ');
    const broken = await sendText('DELETE', `${configMaps}/blank-body?dryRun=All`, '{"dryRun": ["All"]');
    const list = await sendText('DELETE', `${configMaps}/blank-body?dryRun=All`, '["All"]');
    // Then each is refused as a bad request, and nothing is deleted
    for (const answer of [blank, broken, list])
      expect([answer.status, answer.body.reason]).toEqual([400, 'BadRequest']);
    expect(await exists('blank-body')).toBe(true);
  });

  it('a JSON null body is empty DeleteOptions: a real delete even with dryRun=All in the query', async () => {
    await makeConfigMap('null-body');
    const answer = await sendText('DELETE', `${configMaps}/null-body?dryRun=All`, 'null');
    expect(answer.status).toBe(200);
    expect(await exists('null-body')).toBe(false);
  });

  it('fields of the wrong type are a 400 (dryRun must be a list), bad values a 422', async () => {
    await makeConfigMap('typed-body');
    const dryString = await send('DELETE', `${configMaps}/typed-body`, { kind: 'DeleteOptions', dryRun: 'All' });
    const graceString = await send('DELETE', `${configMaps}/typed-body`, { gracePeriodSeconds: '0' });
    const policy = await send('DELETE', `${configMaps}/typed-body`, { propagationPolicy: 'Sideways' });
    const both = await send('DELETE', `${configMaps}/typed-body`, {
      propagationPolicy: 'Orphan',
      orphanDependents: true,
    });
    const queryPolicy = await send('DELETE', `${configMaps}/typed-body?propagationPolicy=Sideways`);
    const queryGrace = await send('DELETE', `${configMaps}/typed-body?gracePeriodSeconds=soon`);
    expect([dryString.status, graceString.status, queryGrace.status]).toEqual([400, 400, 400]);
    expect([policy.status, both.status, queryPolicy.status]).toEqual([422, 422, 422]);
    expect(policy.body.message).toMatch(/propagationPolicy: Unsupported value: "Sideways"/);
    expect(both.body.message).toMatch(/orphanDependents and deletionPropagation cannot be both set/);
    expect(await exists('typed-body')).toBe(true);
  });
});

describe('stand-in API: dryRun other than "All" is refused on every write (ValidateDryRun)', () => {
  it('dryRun=Bogus on create, update, patch and delete is a 422 and writes nothing', async () => {
    // Given a ConfigMap
    await makeConfigMap('bogus');
    // When each write verb says dryRun=Bogus
    const create = await send('POST', `${configMaps}?dryRun=Bogus`, { metadata: { name: 'bogus-new' } });
    const update = await send('PUT', `${configMaps}/bogus?dryRun=Bogus`, {
      metadata: { name: 'bogus' },
      data: { a: '2' },
    });
    const del = await send('DELETE', `${configMaps}/bogus?dryRun=Bogus`);
    const delBody = await send('DELETE', `${configMaps}/bogus`, { kind: 'DeleteOptions', dryRun: ['Bogus'] });
    // Then each is refused as invalid, naming the field, and nothing changed
    for (const answer of [create, update, del, delBody]) {
      expect(answer.status).toBe(422);
      expect(answer.body.message).toMatch(/dryRun: Unsupported value: .*"Bogus".*supported values: "All"/);
    }
    expect(await exists('bogus-new')).toBe(false);
    expect((await core.readNamespacedConfigMap({ name: 'bogus', namespace })).data).toEqual({ a: '1' });
  });
});

describe('clients nobody here wrote send DeleteOptions in the body', () => {
  it('kubectl 1.33 delete --dry-run=server leaves the object', async () => {
    await makeConfigMap('kubectl-dry');
    const { stdout } = await run('kubectl', [
      '--kubeconfig',
      cluster.kubeconfigPath,
      'delete',
      'configmap',
      'kubectl-dry',
      '--dry-run=server',
    ]);
    expect(stdout).toMatch(/configmap "kubectl-dry" deleted \(server dry run\)/);
    expect(await exists('kubectl-dry')).toBe(true);
  });

  it.skipIf(!existsSync(PYTHON))('python3-kubernetes: delete with body=V1DeleteOptions(dry_run=["All"])', async () => {
    await makeConfigMap('python-dry');
    await makeConfigMap('python-real');
    const script = [
      'import sys',
      'from kubernetes import client, config',
      'config.load_kube_config(sys.argv[1])',
      'v1 = client.CoreV1Api()',
      "v1.delete_namespaced_config_map('python-dry', 'default', body=client.V1DeleteOptions(dry_run=['All']))",
      // The query's dry_run beside a body: kube-apiserver reads the body only
      "v1.delete_namespaced_config_map('python-real', 'default', dry_run='All', body=client.V1DeleteOptions())",
    ].join('\n');
    const probe = await run(PYTHON, ['-c', 'import kubernetes']).then(
      () => true,
      () => false,
    );
    if (!probe) throw new Error('python3-kubernetes is not installed: apt-get install python3-kubernetes');
    await run(PYTHON, ['-c', script, cluster.kubeconfigPath]);
    expect(await exists('python-dry')).toBe(true);
    expect(await exists('python-real')).toBe(false);
  });
});
