// The stand-in's OpenAPI as kubectl 1.27 (the oldest installed) and 1.33 (the newest) read it: kubectl explain over
// /openapi/v3 (kubectl pkg/cmd/explain/explain.go, pkg/explain/v2; client-go openapi/groupversion.go, openapi/cached)
// and over /openapi/v2 in gnostic protobuf (client-go discovery/discovery_client.go OpenAPISchema), CRD kinds from
// their openAPIV3Schema (apiextensions-apiserver pkg/controller/openapi/builder/builder.go), --validate=strict|warn
// answered by the server because the v3 documents advertise fieldValidation (cli-runtime pkg/resource/
// query_param_verifier_v3.go; apiserver pkg/endpoints/handlers/create.go, rest.go), and the documents over raw HTTPS
// with kube-openapi's headers (pkg/handler3/handler.go, pkg/handler/handler.go).
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { waitFor } from '../../testkit/wait.js';

const run = promisify(execFile);
/** The oldest and the newest kubectl installed (scripts/setup.sh): v3 explain since 1.27, v2 still read by 1.27. */
const KUBECTL_VERSIONS = ['1.27', '1.33'];
const kubectlPath = (v: string) => `/usr/lib/google-cloud-sdk/bin/kubectl.${v}`;
/** A dozen kubectl processes a test, on a loaded 2-core machine. */
const SYSTEM_TEST_TIMEOUT_MS = 120_000;

/** A field of each built-in kind devop, its examples and its tests use, and the start of its upstream description. */
const BUILTIN_FIELD_DOCS: Record<string, string> = {
  'deployments.spec.replicas': 'Number of desired pods.',
  'services.spec.ports': 'The list of ports that are exposed by this service.',
  'configmaps.data': 'Data contains the configuration data.',
  'secrets.type': 'Used to facilitate programmatic handling of secret data.',
  'jobs.spec.backoffLimit': 'Specifies the number of retries before marking this job failed.',
  'leases.spec.holderIdentity': 'holderIdentity contains the identity of the holder of a current lease.',
  'apiservices.spec.service': 'Service is a reference to the service for this API server.',
  'customresourcedefinitions.spec.versions': 'versions is the list of all API versions of the defined custom resource.',
  'validatingwebhookconfigurations.webhooks':
    'Webhooks is a list of webhooks and the affected resources and operations.',
  'serviceaccounts.secrets': 'Secrets is a list of the secrets in the same namespace',
};

let cluster: ClusterHandle;
let dir: string;

async function kubectl(v: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    // HOME per version: each kubectl keeps its own discovery and OpenAPI cache, as on a user's machine.
    const r = await run(kubectlPath(v), args, {
      env: { ...process.env, KUBECONFIG: cluster.kubeconfigPath, HOME: join(dir, v) },
      timeout: 60_000,
    });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof err.code === 'number' ? err.code : -1, stdout: err.stdout ?? '', stderr: err.stderr ?? '' };
  }
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/** A GET as the admin over the stand-in's HTTPS, with the given headers. */
function get(path: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${cluster.server}${path}`,
      { ca: readFileSync(cluster.caPath), headers: { Authorization: `Bearer ${cluster.adminToken}`, ...headers } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
        );
      },
    );
    req.on('error', reject);
    req.end();
  });
}

function gadgetCrd(sizeDoc: string): string {
  return `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.openapi.devop.test
spec:
  group: openapi.devop.test
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        description: A Gadget is a thing the openapi suite explains.
        properties:
          spec:
            type: object
            description: What the gadget should be.
            properties:
              size:
                type: integer
                description: ${sizeDoc}
              colour:
                type: string
                description: The colour it is painted.
`;
}

beforeAll(async () => {
  for (const v of KUBECTL_VERSIONS)
    if (!existsSync(kubectlPath(v))) throw new Error(`kubectl ${v} is missing at ${kubectlPath(v)}`);
  dir = mkdtempSync(join(tmpdir(), 'devop-openapi-'));
  cluster = await startCluster({ kubelet: false });
  writeFileSync(join(dir, 'crd.yaml'), gadgetCrd('How many parts the gadget has.'));
  const crd = await kubectl('1.33', ['apply', '-f', join(dir, 'crd.yaml')]);
  expect(crd.stderr).toBe('');
  await waitFor('gadgets served', async () => (await get('/apis/openapi.devop.test/v1/gadgets')).status === 200);
});

afterAll(async () => {
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('kubectl explain', () => {
  for (const v of KUBECTL_VERSIONS) {
    it(
      `kubectl ${v}: explain pods.spec.containers prints the field's docs (OpenAPI v3)`,
      async () => {
        // Given the stand-in serving kube-apiserver v1.32.0's schemas
        // When kubectl explains a nested field of a built-in kind
        const r = await kubectl(v, ['explain', 'pods.spec.containers']);
        // Then it prints the kind, the field's type and description, and the fields below it with theirs
        expect(r.stderr).toBe('');
        expect(r.stdout).toMatch(/KIND:\s+Pod\nVERSION:\s+v1/);
        expect(r.stdout).toContain('FIELD: containers <[]Container>');
        expect(r.stdout).toContain('List of containers belonging to the pod.');
        expect(r.stdout).toMatch(/imagePullPolicy\s+<string>/);
        expect(r.stdout).toContain('Image pull policy. One of Always, Never, IfNotPresent.');
      },
      SYSTEM_TEST_TIMEOUT_MS,
    );

    it(
      `kubectl ${v}: explain prints the docs of every built-in kind devop and its examples use`,
      async () => {
        // When kubectl explains a field of each kind
        const docs = await Promise.all(Object.keys(BUILTIN_FIELD_DOCS).map((f) => kubectl(v, ['explain', f])));
        // Then each prints the field's description from kube-apiserver's schema
        expect(docs.map((d) => d.stderr)).toEqual(docs.map(() => ''));
        expect(docs.map((d) => d.stdout.replace(/\s+/g, ' '))).toEqual(
          Object.values(BUILTIN_FIELD_DOCS).map((doc) => expect.stringContaining(doc)),
        );
      },
      SYSTEM_TEST_TIMEOUT_MS,
    );

    it(
      `kubectl ${v}: explain --output plaintext-openapiv2 reads /openapi/v2 (gnostic protobuf)`,
      async () => {
        // When kubectl explains from the v2 document, which it fetches as protobuf
        const r = await kubectl(v, ['explain', 'deployments.spec.strategy', '--output', 'plaintext-openapiv2']);
        // Then the protobuf decodes into the same docs
        expect(r.stderr).toBe('');
        expect(r.stdout).toMatch(/KIND:\s+Deployment\nVERSION:\s+apps\/v1/);
        expect(r.stdout).toContain('The deployment strategy to use to replace existing pods with new ones.');
        expect(r.stdout).toMatch(/rollingUpdate\s+<Object>/);
      },
      SYSTEM_TEST_TIMEOUT_MS,
    );

    it(
      `kubectl ${v}: explain of a CRD kind prints its openAPIV3Schema's descriptions`,
      async () => {
        // Given the Gadget CRD (applied before the suite)
        // When kubectl explains the kind and a field of its spec
        const kind = await kubectl(v, ['explain', 'gadgets']);
        const spec = await kubectl(v, ['explain', 'gadgets.spec']);
        // Then the schema's descriptions are printed, metadata described as on every kind
        expect(kind.stderr).toBe('');
        expect(kind.stdout).toMatch(/GROUP:\s+openapi\.devop\.test\nKIND:\s+Gadget\nVERSION:\s+v1/);
        expect(kind.stdout).toContain('A Gadget is a thing the openapi suite explains.');
        expect(kind.stdout).toMatch(/metadata\s+<ObjectMeta>/);
        expect(spec.stdout).toContain('What the gadget should be.');
        expect(spec.stdout).toMatch(/size\s+<integer>\n\s+How many parts the gadget has\./);
      },
      SYSTEM_TEST_TIMEOUT_MS,
    );
  }

  it(
    'a CRD whose schema changed is explained anew (a new hash in /openapi/v3; kubectl caches per hash)',
    async () => {
      // Given kubectl has explained (and cached) the Gadget once
      expect((await kubectl('1.33', ['explain', 'gadgets.spec.size'])).stdout).toContain('How many parts');
      // When the CRD's schema changes
      const changed = join(dir, 'crd-changed.yaml');
      writeFileSync(changed, gadgetCrd('How many parts, counted again.'));
      expect((await kubectl('1.33', ['apply', '-f', changed])).stderr).toBe('');
      // Then the next explain prints the new description
      await waitFor('the new description', async () =>
        (await kubectl('1.33', ['explain', 'gadgets.spec.size'])).stdout.includes('How many parts, counted again.'),
      );
      writeFileSync(changed, gadgetCrd('How many parts the gadget has.'));
      expect((await kubectl('1.33', ['apply', '-f', changed])).stderr).toBe('');
    },
    SYSTEM_TEST_TIMEOUT_MS,
  );
});

describe('kubectl apply --validate', () => {
  for (const v of KUBECTL_VERSIONS) {
    it(
      `kubectl ${v}: --validate=strict refuses unknown fields (built-in kind and CRD), passes a valid manifest`,
      async () => {
        const ns = `val${v.replace('.', '')}`;
        expect((await kubectl(v, ['create', 'namespace', ns])).code).toBe(0);
        const file = (name: string, text: string) => {
          writeFileSync(join(dir, `${ns}-${name}.yaml`), text);
          return join(dir, `${ns}-${name}.yaml`);
        };
        const pod = (field: string) => `apiVersion: v1
kind: Pod
metadata: {name: typo, namespace: ${ns}}
spec:
  containers:
  - name: c
    image: devop.test/http-echo
    ${field}: IfNotPresent
`;
        const gadget = (field: string) => `apiVersion: openapi.devop.test/v1
kind: Gadget
metadata: {name: g, namespace: ${ns}}
spec: {size: 3, ${field}: red}
`;
        // When manifests with a misspelt field are applied (kubectl's default is --validate=strict)
        const badPod = await kubectl(v, ['apply', '--validate=strict', '-f', file('bad-pod', pod('imagePullPolicyy'))]);
        const badGadget = await kubectl(v, ['apply', '-f', file('bad-gadget', gadget('color'))]);
        // Then each is refused with kube-apiserver's strict decoding error, and nothing is created
        expect(badPod.code).toBe(1);
        expect(badPod.stderr).toContain(
          `Error from server (BadRequest): error when creating "${join(dir, `${ns}-bad-pod.yaml`)}": Pod in version ` +
            `"v1" cannot be handled as a Pod: strict decoding error: ` +
            'unknown field "spec.containers[0].imagePullPolicyy"',
        );
        expect(badGadget.code).toBe(1);
        expect(badGadget.stderr).toContain(
          'Gadget in version "v1" cannot be handled as a Gadget: strict decoding error: unknown field "spec.color"',
        );
        expect((await kubectl(v, ['get', 'pods,gadgets', '-n', ns, '-o', 'name'])).stdout).toBe('');

        // When the same fields are spelt right
        const goodPod = await kubectl(v, ['apply', '--validate=strict', '-f', file('pod', pod('imagePullPolicy'))]);
        const goodGadget = await kubectl(v, ['apply', '-f', file('gadget', gadget('colour'))]);
        // Then both are created
        expect([goodPod.code, goodPod.stderr, goodPod.stdout]).toEqual([0, '', 'pod/typo created\n']);
        expect([goodGadget.code, goodGadget.stderr]).toEqual([0, '']);
        // And changing one (a strategic merge patch with $setElementOrder directives) still passes strict validation
        const changed = pod('imagePullPolicy').replace('image: devop.test/http-echo', 'image: devop.test/other');
        const patched = await kubectl(v, ['apply', '--validate=strict', '-f', file('pod-2', changed)]);
        expect([patched.code, patched.stderr, patched.stdout]).toEqual([0, '', 'pod/typo configured\n']);

        // When a misspelt field is applied with --validate=warn
        const warned = await kubectl(v, ['apply', '--validate=warn', '-f', file('warn', gadget('color'))]);
        // Then the object is written and kubectl prints the server's warning
        expect(warned.code).toBe(0);
        expect(warned.stderr).toContain('Warning: unknown field "spec.color"');
      },
      SYSTEM_TEST_TIMEOUT_MS,
    );
  }
});

describe('the documents over HTTPS', () => {
  it('/openapi/v3 lists group-versions with hashed URLs; each answers with its ETag, 304, 301 for a stale hash', async () => {
    // When the index is read
    const index = await get('/openapi/v3');
    expect(index.status).toBe(200);
    expect(index.headers['content-type']).toBe('application/json');
    expect(index.headers.etag).toMatch(/^"[0-9A-F]{128}"$/);
    const paths = JSON.parse(index.body.toString()).paths;
    // Then it names every group-version the stand-in serves, CRDs' included, each with a SHA-512 hash
    expect(Object.keys(paths)).toEqual(
      expect.arrayContaining(['api/v1', 'apis/apps/v1', 'apis/openapi.devop.test/v1']),
    );
    const url: string = paths['api/v1'].serverRelativeURL;
    const hash = /^\/openapi\/v3\/api\/v1\?hash=([0-9A-F]{128})$/.exec(url)?.[1];
    expect(hash).toBeDefined();

    // When the document is read at its hashed URL
    const doc = await get(url, { Accept: 'application/json' });
    // Then it comes with its hash as ETag and as immutable, and holds kube-apiserver's schemas
    expect(doc.status).toBe(200);
    expect(doc.headers['content-type']).toBe('application/json');
    expect(doc.headers.etag).toBe(`"${hash}"`);
    expect(doc.headers['cache-control']).toBe('public, immutable');
    const v3 = JSON.parse(doc.body.toString());
    expect(v3.openapi).toBe('3.0.0');
    const pod = v3.components.schemas['io.k8s.api.core.v1.Pod'];
    expect(pod['x-kubernetes-group-version-kind']).toEqual([{ group: '', version: 'v1', kind: 'Pod' }]);
    expect(pod.properties.spec).toEqual({
      allOf: [{ $ref: '#/components/schemas/io.k8s.api.core.v1.PodSpec' }],
      description: expect.stringContaining('Specification of the desired behavior of the pod.'),
    });
    const patch = v3.paths['/api/v1/namespaces/{namespace}/pods/{name}'].patch;
    expect(patch.parameters).toContainEqual(expect.objectContaining({ name: 'fieldValidation', in: 'query' }));
    // (kubectl apply takes merge keys from here when the patch takes a strategic merge: kubectl apply/patcher.go)
    expect(Object.keys(patch.requestBody.content)).toContain('application/strategic-merge-patch+json');
    expect(v3.components.schemas['io.k8s.api.core.v1.PodSpec'].properties.containers).toMatchObject({
      'x-kubernetes-patch-merge-key': 'name',
      'x-kubernetes-patch-strategy': 'merge',
    });

    // When it is asked for again with its ETag, or with a hash that is not the current one
    const again = await get(url, { 'If-None-Match': `"${hash}"` });
    const stale = await get(`/openapi/v3/api/v1?hash=${'0'.repeat(128)}`);
    // Then 304 Not Modified, and 301 to the current URL
    expect(again.status).toBe(304);
    expect([stale.status, stale.headers.location]).toEqual([301, url]);
  });

  it('/openapi/v2 answers JSON or gnostic protobuf as Accept asks, with an ETag; 406 for anything else', async () => {
    // When /openapi/v2 is read as JSON, as protobuf under the name kubectl asks for, and as YAML
    const json = await get('/openapi/v2', { Accept: 'application/json' });
    const pb = await get('/openapi/v2', { Accept: 'application/com.github.proto-openapi.spec.v2@v1.0+protobuf' });
    const yaml = await get('/openapi/v2', { Accept: 'application/yaml' });
    // Then JSON is a swagger 2.0 document with the definitions
    expect(json.status).toBe(200);
    expect(json.headers['content-type']).toBe('application/json');
    expect(json.headers.etag).toMatch(/^"[0-9A-F]{128}"$/);
    const v2 = JSON.parse(json.body.toString());
    expect(v2.swagger).toBe('2.0');
    expect(v2.definitions['io.k8s.api.apps.v1.Deployment']['x-kubernetes-group-version-kind']).toEqual([
      { group: 'apps', version: 'v1', kind: 'Deployment' },
    ]);
    // And protobuf comes under kube-openapi's content type, a Document whose field 1 is "2.0"
    expect(pb.status).toBe(200);
    expect(pb.headers['content-type']).toBe('application/com.github.proto-openapi.spec.v2.v1.0+protobuf');
    expect([...pb.body.subarray(0, 5)]).toEqual([0x0a, 3, ...Buffer.from('2.0')]);
    expect(pb.headers.etag).toMatch(/^"[0-9A-F]{128}"$/);
    expect(yaml.status).toBe(406);
  });
});
