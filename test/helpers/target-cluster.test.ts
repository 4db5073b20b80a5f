// The switch between the stand-in and a real cluster: both variables or neither; a wrong path is named.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { externalTarget } from '../../testkit/target-cluster.js';

describe('externalTarget', () => {
  it('is the stand-in when neither variable is set', () => {
    expect(externalTarget({})).toBeUndefined();
  });

  it('is the real cluster when both are set', () => {
    const dir = mkdtempSync(join(tmpdir(), 'devop-target-test-'));
    const kubeconfig = join(dir, 'kubeconfig');
    writeFileSync(kubeconfig, 'apiVersion: v1\nkind: Config\n');
    const env = { DEVOP_TEST_KUBECONFIG: kubeconfig, DEVOP_TEST_AGENT_IMAGE: 'devop/agent:dev' };
    expect(externalTarget(env)).toEqual({ kubeconfig, agentImage: 'devop/agent:dev' });
    rmSync(dir, { recursive: true, force: true });
  });

  it('refuses one variable without the other, and a kubeconfig that does not exist', () => {
    const together = /DEVOP_TEST_KUBECONFIG and DEVOP_TEST_AGENT_IMAGE go together: set both/;
    expect(() => externalTarget({ DEVOP_TEST_KUBECONFIG: '/tmp/k' })).toThrow(together);
    expect(() => externalTarget({ DEVOP_TEST_AGENT_IMAGE: 'devop/agent:dev' })).toThrow(together);
    const env = { DEVOP_TEST_KUBECONFIG: '/nonexistent/kubeconfig', DEVOP_TEST_AGENT_IMAGE: 'devop/agent:dev' };
    expect(() => externalTarget(env)).toThrow('names /nonexistent/kubeconfig, which does not exist');
  });
});
