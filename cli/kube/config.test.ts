// Loading the kubeconfig: the files kubectl would read, and one clear line when there is none, no current context, or
// an unknown --context (client-node alone would fall back to http://localhost:8080).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadKubeConfig } from './config.js';

function kubeconfig(
  dir: string,
  name: string,
  body: { contexts: string[]; current?: string; namespace?: string },
): string {
  const path = join(dir, name);
  const lines = [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    ...body.contexts.map((c) => `- name: ${c}-cluster\n  cluster:\n    server: https://${c}.example:6443`),
    'users:',
    ...body.contexts.map((c) => `- name: ${c}-user\n  user:\n    token: t-${c}`),
    'contexts:',
    ...body.contexts.map(
      (c) =>
        `- name: ${c}\n  context:\n    cluster: ${c}-cluster\n    user: ` +
        `${c}-user${body.namespace ? `\n    namespace: ${body.namespace}` : ''}`,
    ),
    ...(body.current ? [`current-context: ${body.current}`] : []),
  ];
  writeFileSync(path, `${lines.join('\n')}\n`);
  return path;
}

describe('kubeconfig loading', () => {
  const dir = mkdtempSync(join(tmpdir(), 'devop-kc-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('fails in one line when no kubeconfig exists', () => {
    expect(() => loadKubeConfig({ processEnv: { HOME: dir } })).toThrow(
      `no kubeconfig found (~/.kube/config: ${dir}/.kube/config)`,
    );
    expect(() => loadKubeConfig({ kubeconfig: join(dir, 'missing') })).toThrow(
      `no kubeconfig found (--kubeconfig: ${dir}/missing)`,
    );
  });

  it('fails when there is no current context, naming the contexts there are', () => {
    const path = kubeconfig(dir, 'no-current', { contexts: ['dev', 'prod'] });
    expect(() => loadKubeConfig({ kubeconfig: path })).toThrow(
      expect.objectContaining({
        message: `the kubeconfig (${path}) has no current context`,
        hint: 'pass --context (one of: dev, prod) or run `kubectl config use-context NAME`',
      }),
    );
  });

  it('uses --context, and refuses an unknown one', () => {
    const path = kubeconfig(dir, 'two', { contexts: ['dev', 'prod'], current: 'dev', namespace: 'team' });
    const loaded = loadKubeConfig({ kubeconfig: path, context: 'prod' });
    expect(loaded.context).toBe('prod');
    expect(loaded.namespace).toBe('team');
    expect(loaded.kc.getCurrentCluster()?.server).toBe('https://prod.example:6443');
    expect(() => loadKubeConfig({ kubeconfig: path, context: 'staging' })).toThrow(
      'context "staging" is not in the kubeconfig (contexts: dev, prod)',
    );
  });

  it('merges the files of KUBECONFIG, the first one setting the current context', () => {
    const a = kubeconfig(dir, 'a', { contexts: ['a'], current: 'a' });
    const b = kubeconfig(dir, 'b', { contexts: ['b'], current: 'b' });
    const loaded = loadKubeConfig({ processEnv: { KUBECONFIG: `${a}:${join(dir, 'absent')}:${b}` } });
    expect(loaded.files).toEqual([a, b]);
    expect(loaded.context).toBe('a');
    expect(loaded.namespace).toBe('default');
    expect(loaded.kc.getContexts().map((c) => c.name)).toEqual(['a', 'b']);
  });
});
