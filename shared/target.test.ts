// Target syntax: every accepted form parses and prints back; bad strings get a UserError that lists the accepted forms.
import { describe, expect, it } from 'vitest';
import { UserError } from './errors.js';
import { TARGET_FORMS, formatTarget, parseTarget, type Target } from './target.js';

describe('parseTarget', () => {
  it('parses every accepted form', () => {
    const cases: Array<[string, Target]> = [
      ['pod/web-0', { kind: 'pod', name: 'web-0' }],
      ['deploy/farm-operator', { kind: 'deployment', name: 'farm-operator' }],
      ['deployment/farm-operator', { kind: 'deployment', name: 'farm-operator' }],
      ['statefulset/db', { kind: 'statefulset', name: 'db' }],
      ['sts/db', { kind: 'statefulset', name: 'db' }],
      ['rollout/canary', { kind: 'rollout', name: 'canary' }],
      ['apiservice/v1alpha.farm.example.com', { kind: 'apiservice', name: 'v1alpha.farm.example.com' }],
      ['apiservices/v1.metrics.k8s.io', { kind: 'apiservice', name: 'v1.metrics.k8s.io' }],
      ['deploy/farm-operator/container/main', { kind: 'deployment', name: 'farm-operator', container: 'main' }],
      ['pod/web-0/container/sidecar', { kind: 'pod', name: 'web-0', container: 'sidecar' }],
      ['sts/db.v2/container/pg', { kind: 'statefulset', name: 'db.v2', container: 'pg' }],
      ['targetless', { kind: 'targetless' }],
      ['  Deploy/x  ', { kind: 'deployment', name: 'x' }],
      ['validatingwebhookconfiguration/echo', { kind: 'validatingwebhookconfiguration', name: 'echo' }],
      ['validatingwebhookconfigurations/echo', { kind: 'validatingwebhookconfiguration', name: 'echo' }],
      [
        'validatingwebhookconfiguration/echo/webhook/replicas.echoes.example.com',
        { kind: 'validatingwebhookconfiguration', name: 'echo', webhook: 'replicas.echoes.example.com' },
      ],
      [
        'mutatingwebhookconfigurations/m/webhook/a.b.c',
        { kind: 'mutatingwebhookconfiguration', name: 'm', webhook: 'a.b.c' },
      ],
    ];
    for (const [text, target] of cases) expect(parseTarget(text), text).toEqual(target);
  });

  it('prints the canonical form, which parses back to the same target', () => {
    expect(formatTarget(parseTarget('deployment/farm-operator'))).toBe('deploy/farm-operator');
    expect(formatTarget(parseTarget('sts/db/container/pg'))).toBe('statefulset/db/container/pg');
    expect(formatTarget({ kind: 'targetless' })).toBe('targetless');
    for (const text of [
      'pod/a',
      'deploy/b/container/c',
      'statefulset/d',
      'rollout/e/container/f',
      'apiservice/v1.g.io',
      'validatingwebhookconfiguration/g/webhook/h.example.com',
      'mutatingwebhookconfiguration/i',
      'targetless',
    ]) {
      expect(formatTarget(parseTarget(text))).toBe(text);
      expect(parseTarget(formatTarget(parseTarget(text)))).toEqual(parseTarget(text));
    }
  });

  it('rejects bad strings with a UserError that names the problem and lists the accepted forms', () => {
    const cases: Array<[string, RegExp]> = [
      ['', /is empty/],
      ['farm-operator', /names no kind/],
      ['service/web', /"service" is not a target kind/],
      ['deploy/', /deployment name is missing/],
      ['deploy/Farm_Operator', /not a valid deployment name/],
      ['pod/web/sidecar', /expected "\/container\/NAME"/],
      ['pod/web/container/', /container name is missing/],
      ['pod/web/container/a/b', /container name is missing or followed by more/],
      ['pod/web/container/Side.car', /not a valid container name/],
      ['validatingwebhookconfiguration/echo/container/x', /expected "\/webhook\/NAME"/],
      ['mutatingwebhookconfiguration/m/webhook/', /webhook name is missing/],
      ['mutatingwebhookconfiguration/m/webhook/A_B', /not a valid webhook name/],
    ];
    for (const [text, why] of cases) {
      let err: unknown;
      try {
        parseTarget(text);
      } catch (e) {
        err = e;
      }
      expect(err, text).toBeInstanceOf(UserError);
      expect((err as UserError).message).toMatch(why);
      expect((err as UserError).message).toContain(`"${text}"`);
      expect((err as UserError).hint).toBe(`use one of: ${TARGET_FORMS}`);
    }
  });
});
