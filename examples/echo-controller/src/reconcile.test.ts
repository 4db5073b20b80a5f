// Reconcile decisions: given an Echo and the Deployment that exists, which actions the controller takes.
import type { V1Deployment } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { FINALIZER, type Echo } from './echo.js';
import { desiredDeployment, reconcile } from './reconcile.js';

const IMAGE = 'devop.test/http-echo';

function echo(
  over: {
    replicas?: number;
    finalizers?: string[];
    deleting?: boolean;
    generation?: number;
    status?: Echo['status'];
  } = {},
): Echo {
  return {
    apiVersion: 'example.com/v1',
    kind: 'Echo',
    metadata: {
      name: 'hello',
      namespace: 'default',
      uid: 'uid-hello',
      generation: over.generation ?? 1,
      finalizers: over.finalizers ?? [FINALIZER],
      ...(over.deleting ? { deletionTimestamp: new Date('2026-01-01T00:00:00Z') } : {}),
    },
    spec: { replicas: over.replicas ?? 2 },
    ...(over.status ? { status: over.status } : {}),
  };
}

/** The Deployment as the server would hold it after the controller created it, with a status. */
function existing(
  e: Echo,
  over: { replicas?: number; ready?: number; image?: string; ownerUid?: string; deleting?: boolean } = {},
): V1Deployment {
  const d = desiredDeployment(e, { image: over.image ?? IMAGE });
  return {
    ...d,
    metadata: {
      ...d.metadata,
      resourceVersion: '77',
      uid: 'uid-deploy',
      ownerReferences: [{ ...d.metadata!.ownerReferences![0], uid: over.ownerUid ?? e.metadata.uid! }],
      ...(over.deleting ? { deletionTimestamp: new Date() } : {}),
    },
    spec: { ...d.spec!, replicas: over.replicas ?? e.spec.replicas },
    status: { replicas: over.replicas ?? e.spec.replicas, readyReplicas: over.ready ?? 0 },
  };
}

const types = (actions: { type: string }[]): string[] => actions.map((a) => a.type);

describe('reconcile', () => {
  it('a new Echo: finalizer first, then its Deployment, then a status with nothing ready yet', () => {
    const e = echo({ finalizers: [] });
    const actions = reconcile(e, undefined, { image: IMAGE });
    expect(types(actions)).toEqual(['addFinalizer', 'createDeployment', 'updateStatus']);
    expect(actions[2]).toEqual({
      type: 'updateStatus',
      status: { replicas: 0, readyReplicas: 0, observedGeneration: 1 },
    });
  });

  it('the created Deployment runs spec.replicas pods of the echo image and is owned by the Echo', () => {
    const [, create] = reconcile(echo({ finalizers: [], replicas: 2 }), undefined, { image: IMAGE });
    expect(create.type).toBe('createDeployment');
    const d = (create as { deployment: V1Deployment }).deployment;
    expect(d.metadata).toMatchObject({
      name: 'hello',
      namespace: 'default',
      labels: { 'app.kubernetes.io/managed-by': 'echo-controller', 'example.com/echo': 'hello' },
    });
    expect(d.metadata?.ownerReferences).toEqual([
      {
        apiVersion: 'example.com/v1',
        kind: 'Echo',
        name: 'hello',
        uid: 'uid-hello',
        controller: true,
        blockOwnerDeletion: true,
      },
    ]);
    expect(d.spec?.replicas).toBe(2);
    expect(d.spec?.selector.matchLabels).toEqual({ 'example.com/echo': 'hello' });
    expect(d.spec?.template.metadata?.labels).toMatchObject({ 'example.com/echo': 'hello' });
    expect(d.spec?.template.spec?.containers.map((c) => c.image)).toEqual([IMAGE]);
  });

  it('in sync with a status that matches: nothing to do', () => {
    const e = echo({ status: { replicas: 2, readyReplicas: 2, observedGeneration: 1 } });
    expect(reconcile(e, existing(e, { ready: 2 }), { image: IMAGE })).toEqual([]);
  });

  it('pods became ready: only the status changes', () => {
    const e = echo({ status: { replicas: 2, readyReplicas: 0, observedGeneration: 1 } });
    expect(reconcile(e, existing(e, { ready: 2 }), { image: IMAGE })).toEqual([
      { type: 'updateStatus', status: { replicas: 2, readyReplicas: 2, observedGeneration: 1 } },
    ]);
  });

  it(
    'replicas changed 2 → 3: the Deployment is updated in place (keeping its resourceVersion) and the new ' +
      'generation observed',
    () => {
      const before = echo({ replicas: 2 });
      const dep = existing(before, { ready: 2 });
      const after = echo({
        replicas: 3,
        generation: 2,
        status: { replicas: 2, readyReplicas: 2, observedGeneration: 1 },
      });
      const actions = reconcile(after, dep, { image: IMAGE });
      expect(types(actions)).toEqual(['updateDeployment', 'updateStatus']);
      const updated = (actions[0] as { deployment: V1Deployment }).deployment;
      expect(updated.spec?.replicas).toBe(3);
      expect(updated.metadata?.resourceVersion).toBe('77');
      expect(updated.metadata?.uid).toBe('uid-deploy');
      expect(actions[1]).toEqual({
        type: 'updateStatus',
        status: { replicas: 2, readyReplicas: 2, observedGeneration: 2 },
      });
    },
  );

  it('a Deployment with another image is brought back to the echo image', () => {
    const e = echo({ status: { replicas: 2, readyReplicas: 2, observedGeneration: 1 } });
    const actions = reconcile(e, existing(e, { ready: 2, image: 'someone/else' }), { image: IMAGE });
    expect(types(actions)).toEqual(['updateDeployment']);
    expect((actions[0] as { deployment: V1Deployment }).deployment.spec?.template.spec?.containers[0].image).toBe(
      IMAGE,
    );
  });

  it('the Deployment was deleted: it is created again and the status drops to zero', () => {
    const e = echo({ status: { replicas: 2, readyReplicas: 2, observedGeneration: 1 } });
    expect(types(reconcile(e, undefined, { image: IMAGE }))).toEqual(['createDeployment', 'updateStatus']);
  });

  it('the Deployment is being deleted: wait for it to go (its DELETED event brings the Echo back)', () => {
    const e = echo({ status: { replicas: 0, readyReplicas: 0, observedGeneration: 1 } });
    expect(reconcile(e, existing(e, { deleting: true }), { image: IMAGE })).toEqual([]);
  });

  it('a Deployment of that name that someone else owns is not touched', () => {
    const e = echo();
    const actions = reconcile(e, existing(e, { ownerUid: 'someone-else' }), { image: IMAGE });
    expect(types(actions)).toEqual(['conflict']);
  });

  it('Echo deleted while its Deployment exists: delete the Deployment, keep the finalizer', () => {
    const e = echo({ deleting: true });
    expect(reconcile(e, existing(e), { image: IMAGE })).toEqual([{ type: 'deleteDeployment', name: 'hello' }]);
  });

  it('Echo deleted and its Deployment still going: wait', () => {
    const e = echo({ deleting: true });
    expect(reconcile(e, existing(e, { deleting: true }), { image: IMAGE })).toEqual([]);
  });

  it('Echo deleted and its Deployment gone: remove the finalizer', () => {
    expect(reconcile(echo({ deleting: true }), undefined, { image: IMAGE })).toEqual([{ type: 'removeFinalizer' }]);
  });

  it('Echo deleted without our finalizer: nothing is ours to do', () => {
    const e = echo({ deleting: true, finalizers: ['someone.else/finalizer'] });
    expect(reconcile(e, existing(e), { image: IMAGE })).toEqual([]);
  });

  it('does not change its inputs', () => {
    const e = echo({ finalizers: [], replicas: 3 });
    const dep = existing(echo({ replicas: 2 }));
    const snapshot = JSON.stringify([e, dep]);
    reconcile(e, dep, { image: IMAGE });
    expect(JSON.stringify([e, dep])).toBe(snapshot);
  });
});
