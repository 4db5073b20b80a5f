// A controller under `devop exec --shadow` deletes through client-node and kubectl — both send DeleteOptions in the
// body, which kube-apiserver reads instead of the query (k8s.io/apiserver pkg/endpoints/handlers/delete.go) — gets a
// successful answer for each, sees them listed as dry runs, and the object stays in the cluster.
import { join } from 'node:path';
import type { CoreV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { devopExec, ROOT, startE2ECluster, type Cluster, type DevopRun } from '../../testkit/e2e.js';

requireRoot('e2e: --shadow deletes');

/** The newest kubectl installed beside the one on the PATH (docs/testing.md). */
const KUBECTL = '/usr/lib/google-cloud-sdk/bin/kubectl.1.33';
const DELETER = join(ROOT, 'test', 'e2e', 'fixtures', 'shadow-deleter.mjs');

describe('devop exec --shadow: a controller that deletes', () => {
  let cluster: Cluster;
  let core: CoreV1Api;
  let run: DevopRun | undefined;

  beforeAll(async () => {
    // The targetless agent (outgoing traffic and DNS) runs as a pod: the stand-in with its kubelet
    ({ cluster, core } = await startE2ECluster());
  });

  afterAll(async () => {
    await run?.dispose();
    await cluster?.stop();
  });

  it('gets a successful dry-run answer from client-node and kubectl, and the ConfigMap stays', async () => {
    // Given a ConfigMap in the cluster
    await core.createNamespacedConfigMap({
      namespace: 'default',
      body: { metadata: { name: 'shadow-kept' }, data: { a: '1' } },
    });
    // When a controller run by devop --shadow deletes it with client-node, then with kubectl
    run = devopExec(cluster, ['--shadow', '-t', 'targetless'], [process.execPath, DELETER, 'shadow-kept'], {
      env: { KUBECTL },
    });
    const { code } = await run.exited;
    // Then both deletes were answered as successes (202 for client-node's foreground deletion) and listed as dry
    // runs, and devop ends with the command's code 0
    expect(code, run.output).toBe(0);
    expect(run.stdout).toContain('shadow-deleter: client-node answered ConfigMap');
    expect(run.stdout).toContain('shadow-deleter: kubectl configmap "shadow-kept" deleted');
    const listed = run.stderr.match(/^devop: write delete ConfigMap default\/shadow-kept → dry-run 20[02] /gm) ?? [];
    expect(listed.length, run.output).toBe(2);
    // And the cluster still has the ConfigMap as it was
    const kept = await core.readNamespacedConfigMap({ name: 'shadow-kept', namespace: 'default' });
    expect(kept.data).toEqual({ a: '1' });
  }, 180_000);
});
