// Kubernetes API failures become one-line UserErrors naming the fix.
import { describe, expect, it } from 'vitest';
import type { UserError } from '../../shared/errors.js';
import { mapApiError } from './errors.js';

const apiError = (code: number, message = 'x') =>
  Object.assign(new Error(`HTTP-Code: ${code}`), { code, body: JSON.stringify({ kind: 'Status', message }) });
const ctx = {
  action: 'create the agent Job',
  verb: 'create',
  resource: 'jobs.batch',
  namespace: 'shop',
  name: 'devop-agent-1',
};

describe('API error mapping', () => {
  it('names the verb and resource of a 403', () => {
    const err = mapApiError(apiError(403), ctx) as UserError;
    expect(err.message).toBe(
      'forbidden: cannot create jobs.batch in namespace "shop" (needed to create the agent Job)',
    );
    expect(err.hint).toBe(
      'ask a cluster admin for RBAC permission to "create" on "jobs.batch" in namespace "shop", or use another ' +
        '--context',
    );
  });

  it('says not found for 404 and leftover agent for 409', () => {
    expect((mapApiError(apiError(404), ctx) as UserError).message).toBe(
      'jobs.batch "devop-agent-1" not found in namespace "shop" (while trying to create the agent Job)',
    );
    const conflict = mapApiError(apiError(409), ctx) as UserError;
    expect(conflict.message).toMatch(/already exists .*a devop agent from an earlier session is probably left over/);
    expect(conflict.hint).toMatch(/devop clean/);
  });

  it('says when the API server cannot be reached, and passes other errors through', () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6443'), { code: 'ECONNREFUSED' });
    expect((mapApiError(refused, ctx) as UserError).message).toBe(
      'cannot reach the Kubernetes API server (ECONNREFUSED) while trying to create the agent Job',
    );
    const other = new Error('boom');
    expect(mapApiError(other, ctx)).toBe(other);
  });
});
