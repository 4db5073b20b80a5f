// What a shadowed write would change, as the plain line and the TUI's diff line show it.
import { describe, expect, it } from 'vitest';
import { formatWriteLine } from './lines.js';
import { objectChanges } from './object-diff.js';

describe('write changes', () => {
  it('lists changed leaves, leaves bookkeeping out, and caps the list', () => {
    const before = { metadata: { resourceVersion: '1', labels: { a: 'x' } }, spec: { replicas: 2, image: 'e:1' } };
    const after = { metadata: { resourceVersion: '2', labels: { a: 'y' } }, spec: { replicas: 3, image: 'e:1' } };
    expect(objectChanges(before, after)).toEqual(['metadata.labels.a: "x" → "y"', 'spec.replicas: 2 → 3']);
    expect(objectChanges(null, after)).toEqual(['created']);
    const containers = (image: string) => ({ spec: { containers: [{ name: 'c', image }] } });
    expect(objectChanges(containers('e:1'), containers('e:2'))).toEqual(['spec.containers[0].image: "e:1" → "e:2"']);
    expect(objectChanges(before, null)).toEqual(['deleted']);
    expect(objectChanges({ a: 1, b: 1, c: 1 }, { a: 2, b: 2, c: 2 }, 2)).toEqual(['a: 1 → 2', 'b: 1 → 2', '… 1 more']);
  });

  it('makes one plain line per write', () => {
    expect(
      formatWriteLine({
        type: 'write',
        id: '1',
        verb: 'update',
        kind: 'Echo',
        resource: 'echoes',
        subresource: 'status',
        namespace: 'default',
        name: 'hello',
        status: 200,
        result: 'dry-run',
        before: { status: { readyReplicas: 2 } },
        after: { status: { readyReplicas: 3 } },
      }),
    ).toBe('devop: write update Echo/status default/hello → dry-run 200 (status.readyReplicas: 2 → 3)');
  });
});
