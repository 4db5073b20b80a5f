// Unit tests of doctor's pure checks: Pod Security labels, node runtimes, the permission list and the report lines.
import { describe, expect, it } from 'vitest';
import { describeCheck } from '../kube/access.js';
import { formatDoctorReport, neededPermissions, podSecurityCheck, runtimeCheck } from './doctor.js';

describe('podSecurityCheck', () => {
  it('fails for enforce=baseline or restricted, naming the label and the fix', () => {
    for (const level of ['baseline', 'restricted']) {
      const c = podSecurityCheck(
        { metadata: { name: 'team', labels: { 'pod-security.kubernetes.io/enforce': level } } },
        'team',
      );
      expect(c.status).toBe('fail');
      expect(c.detail).toContain(`enforce=${level} rejects the agent`);
      expect(c.fix).toContain('kubectl label ns team pod-security.kubernetes.io/enforce=privileged');
    }
  });
  it('passes for privileged or no label, mentioning warn/audit labels', () => {
    expect(
      podSecurityCheck({ metadata: { labels: { 'pod-security.kubernetes.io/enforce': 'privileged' } } }, 'a').status,
    ).toBe('ok');
    const c = podSecurityCheck({ metadata: { labels: { 'pod-security.kubernetes.io/warn': 'restricted' } } }, 'a');
    expect(c.status).toBe('ok');
    expect(c.detail).toBe('enforce=(none: privileged); warn=restricted only warns/audits');
  });
});

describe('runtimeCheck', () => {
  it('knows containerd, cri-o and docker, and warns about others', () => {
    expect(
      runtimeCheck([
        { name: 'n1', runtime: 'containerd://1.7.22' },
        { name: 'n2', runtime: 'cri-o://1.29.1' },
      ]),
    ).toMatchObject({ status: 'ok', detail: 'n1: containerd://1.7.22, n2: cri-o://1.29.1' });
    expect(runtimeCheck([{ name: 'n1', runtime: 'frakti://1' }])).toMatchObject({
      status: 'warn',
      fix: expect.stringContaining('--ephemeral'),
    });
    expect(runtimeCheck([]).status).toBe('warn');
  });
});

describe('neededPermissions', () => {
  it('lists everything a session needs, with ephemeral containers and leases optional', () => {
    const list = neededPermissions('app', 'agents');
    const names = list.map((p) => `${describeCheck(p.check)}@${p.check.namespace}${p.optional ? '?' : ''}`);
    expect(names).toEqual([
      'get pods@app',
      'list pods@app',
      'watch pods@app',
      'create pods/portforward@app',
      'get pods/log@agents',
      'create jobs.batch@agents',
      'get jobs.batch@agents',
      'list jobs.batch@agents',
      'delete jobs.batch@agents',
      'create secrets@agents',
      'get secrets@agents',
      'delete secrets@app?',
      'patch pods/ephemeralcontainers@app?',
      'get leases.coordination.k8s.io@app?',
      'create leases.coordination.k8s.io@app?',
      'update leases.coordination.k8s.io@app?',
    ]);
  });
});

describe('formatDoctorReport', () => {
  it('prints one line per check, the fix under failures and warnings, and a summary', () => {
    const text = formatDoctorReport({
      ok: false,
      checks: [
        { id: 'api', title: 'API server', status: 'ok', detail: 'answers' },
        { id: 'rbac', title: 'RBAC create jobs.batch in a', status: 'fail', detail: 'denied', fix: 'ask an admin' },
        { id: 'image', title: 'agent image x', status: 'info', detail: 'not verified', fix: 'mirror it' },
        { id: 'rt', title: 'runtime', status: 'warn', detail: 'odd', fix: 'try --ephemeral' },
      ],
    });
    expect(text).toBe(
      [
        '✓ API server: answers',
        '✗ RBAC create jobs.batch in a: denied',
        '    fix: ask an admin',
        '- agent image x: not verified',
        '! runtime: odd',
        '    fix: try --ephemeral',
        'devop doctor: 1 check failed',
        '',
      ].join('\n'),
    );
  });
});
