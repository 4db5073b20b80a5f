// The shadow proxy's in-memory Leases as client-go's LeaseLock uses them: GET 404, POST create, PUT with the
// resourceVersion it read (a stale one conflicts), and a merge patch.
import { describe, expect, it } from 'vitest';
import { LeaseMemory, mergePatch } from './leases.js';

const at = { apiVersion: 'coordination.k8s.io/v1', namespace: 'ns' };

describe('in-memory Leases', () => {
  it('GET 404 → POST create → PUT with resourceVersion; stale PUT and second POST conflict', () => {
    const memory = new LeaseMemory();
    // Given no Lease: a read is a NotFound Status
    const missing = memory.handle({ ...at, method: 'GET', name: 'ctl' });
    expect(missing.status).toBe(404);
    expect(missing.body).toMatchObject({ kind: 'Status', reason: 'NotFound', code: 404 });
    // When the candidate creates it
    const created = memory.handle({
      ...at,
      method: 'POST',
      body: { metadata: { name: 'ctl' }, spec: { holderIdentity: 'me' } },
    });
    // Then it exists with a resourceVersion, and the change is reported
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ kind: 'Lease', metadata: { name: 'ctl', namespace: 'ns' } });
    expect(created.change?.before).toBeNull();
    const version = created.body.metadata?.resourceVersion;
    expect(version).toBeTruthy();
    // And a renewal with that version succeeds and moves the version on
    const renewed = memory.handle({ ...at, method: 'PUT', name: 'ctl', body: created.body });
    expect(renewed.status).toBe(200);
    expect(renewed.body.metadata?.resourceVersion).not.toBe(version);
    // And a renewal with the old version conflicts, as does a second create
    expect(memory.handle({ ...at, method: 'PUT', name: 'ctl', body: created.body }).status).toBe(409);
    expect(memory.handle({ ...at, method: 'POST', body: { metadata: { name: 'ctl' } } }).status).toBe(409);
    // And a merge patch changes what it names
    const patched = memory.handle({
      ...at,
      method: 'PATCH',
      name: 'ctl',
      contentType: 'application/merge-patch+json',
      body: { spec: { holderIdentity: '' } },
    });
    expect(patched.body.spec).toEqual({ holderIdentity: '' });
    // And a Lease of another namespace is another Lease
    expect(memory.handle({ ...at, namespace: 'other', method: 'GET', name: 'ctl' }).status).toBe(404);
  });

  it('merge patch: null removes, objects merge, arrays replace', () => {
    expect(mergePatch({ a: 1, b: { c: 2, d: 3 }, e: [1] }, { a: null, b: { c: 4 }, e: [2] })).toEqual({
      b: { c: 4, d: 3 },
      e: [2],
    });
  });
});
