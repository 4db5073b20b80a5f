// Pure wire helpers: which Table version kubectl's Accept asks for, and ages written as kubectl writes them.
import { describe, expect, it } from 'vitest';
import { humanDuration, tableVersionAccepted } from './api.js';

describe('tableVersionAccepted', () => {
  it('reads kubectl get’s Accept header', () => {
    expect(
      tableVersionAccepted(
        [
          'application/json;as=Table;v=v1;g=meta.k8s.io',
          'application/json;as=Table;v=v1beta1;g=meta.k8s.io',
          'application/json',
        ].join(','),
      ),
    ).toBe('v1');
    expect(tableVersionAccepted('application/json;as=Table;v=v1beta1;g=meta.k8s.io, application/json')).toBe('v1beta1');
  });

  it('answers plain objects when plain JSON comes first or nothing is said', () => {
    expect(tableVersionAccepted('application/json, application/json;as=Table;v=v1;g=meta.k8s.io')).toBeUndefined();
    expect(tableVersionAccepted(undefined)).toBeUndefined();
    expect(
      tableVersionAccepted('application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json'),
    ).toBeUndefined();
  });
});

describe('humanDuration', () => {
  it.each([
    [-5_000, '<invalid>'],
    [-500, '0s'],
    [45_000, '45s'],
    [119_000, '119s'],
    [200_000, '3m20s'],
    [180_000, '3m'],
    [15 * 60_000, '15m'],
    [125 * 60_000, '125m'],
    [5 * 3_600_000, '5h'],
    [(5 * 60 + 7) * 60_000, '5h7m'],
    [20 * 3_600_000, '20h'],
    [(3 * 24 + 4) * 3_600_000, '3d4h'],
    [20 * 24 * 3_600_000, '20d'],
    [(3 * 365 + 3) * 24 * 3_600_000, '3y3d'],
    [9 * 365 * 24 * 3_600_000, '9y'],
  ])('%i ms → %s', (ms, text) => {
    expect(humanDuration(ms)).toBe(text);
  });
});
