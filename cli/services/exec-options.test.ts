// Flags over devop.json: which wins, defaults, and the one-line errors for bad flags.
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../config/schema.js';
import { mergeExecOptions, parseDuration } from './exec-options.js';
import { parsePortSpec, resolvePorts } from './ports.js';

const fileConfig = parseConfig(
  {
    target: 'deploy/from-file',
    namespace: 'file-ns',
    incoming: { mode: 'steal', ports: [3000, '80:8080'], httpFilter: { header: 'x-user: bob' }, flush: false },
    env: { exclude: ['SECRET_*'], override: { A: '1' }, file: '.env.dev' },
    agent: { image: 'registry/agent:1', ttlSeconds: 5, startupTimeoutSeconds: 20, ephemeral: true },
  },
  'devop.json',
);

describe('exec options', () => {
  it('takes devop.json values when no flag is given', () => {
    const o = mergeExecOptions({}, fileConfig, ['node', 'server.js'], '/project');
    expect(o).toMatchObject({
      command: 'node',
      args: ['server.js'],
      target: 'deploy/from-file',
      namespace: 'file-ns',
      mode: 'steal',
      ports: ['3000', '80:8080'],
      httpFilter: { header: 'x-user: bob', match: 'all' },
      flush: false,
      env: { include: ['*'], exclude: ['SECRET_*'], override: { A: '1' }, file: '/project/.env.dev' },
      agentImage: 'registry/agent:1',
      agentTtlSeconds: 5,
      startupTimeoutMs: 20_000,
      ephemeral: true,
    });
  });

  it('lets flags win over devop.json', () => {
    const o = mergeExecOptions(
      {
        target: 'pod/p',
        namespace: 'flag-ns',
        mirror: true,
        port: ['9000'],
        httpPathFilter: '^/api',
        flush: true,
        envExclude: ['X'],
        agentTtl: '90',
        startupTimeout: '1500ms',
        ephemeral: false,
      },
      fileConfig,
      ['./run'],
    );
    expect(o).toMatchObject({
      target: 'pod/p',
      namespace: 'flag-ns',
      mode: 'mirror',
      ports: ['9000'],
      httpFilter: { path: '^/api', match: 'all' },
      flush: true,
      agentTtlSeconds: 90,
      startupTimeoutMs: 1500,
      ephemeral: false,
    });
    expect(o.env.exclude).toEqual(['SECRET_*', 'X']);
  });

  it('defaults to mirror with the declared ports and the version-matched agent image', () => {
    const o = mergeExecOptions({ target: 'deploy/x' }, parseConfig({}, 'defaults'), ['true']);
    expect(o).toMatchObject({
      mode: 'mirror',
      ports: [],
      flush: true,
      stealProbes: false,
      agentImage: 'ghcr.io/devop/agent:0.1.0',
      startupTimeoutMs: 60_000,
    });
    expect(o.httpFilter).toBeUndefined();
  });

  it('refuses contradictory or malformed flags with one line and the fix', () => {
    const d = parseConfig({}, 'defaults');
    expect(() => mergeExecOptions({ steal: true, mirror: true }, d, ['x'])).toThrow(
      /--steal and --mirror were both given/,
    );
    expect(() => mergeExecOptions({}, d, [])).toThrow(/no local command given/);
    expect(() => mergeExecOptions({ port: ['70000'] }, d, ['x'])).toThrow(/bad port "70000"/);
    expect(() => mergeExecOptions({ httpHeaderFilter: 'no-colon' }, d, ['x'])).toThrow(/is not "Name: value-regex"/);
    expect(() => mergeExecOptions({ httpPathFilter: '(' }, d, ['x'])).toThrow(/not a valid regular expression/);
    expect(() => mergeExecOptions({ startupTimeout: 'soon' }, d, ['x'])).toThrow(
      /--startup-timeout soon is not a duration/,
    );
  });

  it('parses durations and port specs', () => {
    expect(parseDuration('2m', '--x')).toBe(120_000);
    expect(parseDuration('3', '--x')).toBe(3000);
    expect(parsePortSpec('80:8080')).toEqual({ remote: 80, local: 8080 });
    expect(parsePortSpec(3000)).toEqual({ remote: 3000, local: 3000 });
    expect(
      resolvePorts([], { name: 'c', ports: [{ containerPort: 3000 }, { containerPort: 53, protocol: 'UDP' }] }),
    ).toEqual([{ remote: 3000, local: 3000 }]);
    expect(() => resolvePorts(['3000', '3000:1'], undefined)).toThrow(/port 3000 is given twice/);
  });

  it('--shadow from the flag or devop.json; --in-cluster only with it', () => {
    const none = parseConfig({}, 'devop.json');
    expect(mergeExecOptions({}, none, ['ctl']).shadow).toBeUndefined();
    expect(mergeExecOptions({ shadow: true }, none, ['ctl']).shadow).toEqual({ inCluster: false });
    const file = parseConfig({ shadow: { enabled: true, inCluster: true } }, 'devop.json');
    expect(mergeExecOptions({}, file, ['ctl']).shadow).toEqual({ inCluster: true });
    expect(() => mergeExecOptions({ inCluster: true }, none, ['ctl'])).toThrow(/--in-cluster only applies to --shadow/);
  });

  it('--record-secrets from the flag or devop.json, only with --record', () => {
    const none = parseConfig({}, 'devop.json');
    expect(mergeExecOptions({ record: 'a.har' }, none, ['ctl']).recordSecrets).toBe(false);
    expect(mergeExecOptions({ record: 'a.har', recordSecrets: true }, none, ['ctl']).recordSecrets).toBe(true);
    const file = parseConfig({ recordSecrets: true }, 'devop.json');
    expect(mergeExecOptions({ record: 'a.har' }, file, ['ctl']).recordSecrets).toBe(true);
    // A devop.json that sets it without --record changes nothing; the flag alone is a mistake
    expect(mergeExecOptions({}, file, ['ctl']).recordSecrets).toBeUndefined();
    expect(() => mergeExecOptions({ recordSecrets: true }, none, ['ctl'])).toThrow(
      /^--record-secrets only applies to --record FILE$/,
    );
  });
});

describe('the JSON body filter', () => {
  it("Given --http-body-filter, Then it is the HTTP filter (a filter flag replaces the file's criteria)", () => {
    const o = mergeExecOptions({ httpBodyFilter: '$.user.name: ^alice$' }, fileConfig, ['node'], '/project');
    expect(o.httpFilter).toEqual({ body: '$.user.name: ^alice$', match: 'all' });
  });

  it('Given a body filter alone in devop.json, Then it is the filter', () => {
    const config = parseConfig({ incoming: { httpFilter: { body: 'items[0].kind: Llama' } } }, 'devop.json');
    expect(mergeExecOptions({}, config, ['node'], '/project').httpFilter).toEqual({
      body: 'items[0].kind: Llama',
      match: 'all',
    });
  });

  it('Given a body filter that is not "json-path: regex", Then one line names it and the form, flag or file', () => {
    expect(() => mergeExecOptions({ httpBodyFilter: 'user.name' }, fileConfig, ['node'], '/project')).toThrow(
      '--http-body-filter "user.name" is not "json-path: regex"',
    );
    let err: unknown;
    try {
      parseConfig({ incoming: { httpFilter: { body: '$.a: (x)\\1' } } }, 'devop.json');
    } catch (e) {
      err = e;
    }
    expect((err as Error).message).toMatch(/^devop\.json: incoming\.httpFilter\.body is /);
    expect((err as { hint?: string }).hint).toContain('"json-path: value-regex"');
  });
});

describe('--tls-secret', () => {
  it('Given --tls-secret with a filtered steal, Then the exec takes the names, the filter sent on none', () => {
    const o = mergeExecOptions({ tlsSecret: ['api-tls', '8443=admin-tls'] }, fileConfig, ['node'], '/project');
    expect(o.tlsSecrets).toEqual(['api-tls', '8443=admin-tls']);
    expect(o.httpFilter).toEqual({ header: 'x-user: bob', match: 'all' });
  });

  it('Given the devop.json key, Then it is checked as the flag is, and used the same way', () => {
    const config = parseConfig(
      { incoming: { mode: 'steal', httpFilter: { header: 'x-dev: me', tlsSecret: ['8443=api-tls'] } } },
      'devop.json',
    );
    expect(mergeExecOptions({}, config, ['node'], '/project').tlsSecrets).toEqual(['8443=api-tls']);
    // A criterion's flag replaces the file's criteria, not the Secret beside them
    const flagged = mergeExecOptions({ httpHeaderFilter: 'x-dev: you' }, config, ['node'], '/project');
    expect([flagged.httpFilter?.header, flagged.tlsSecrets]).toEqual(['x-dev: you', ['8443=api-tls']]);
    expect(() => parseConfig({ incoming: { httpFilter: { tlsSecret: ['Api TLS'] } } }, 'devop.json')).toThrow(
      /incoming\.httpFilter\.tlsSecret/,
    );
    expect(() => mergeExecOptions({ tlsSecret: ['Api TLS'] }, fileConfig, ['node'], '/project')).toThrow(
      '--tls-secret "Api TLS" is not "[PORT=]NAME"',
    );
  });

  it('Given --tls-secret without a filter or with --mirror, Then one line says it applies to filtered steals', () => {
    const whole = parseConfig({ incoming: { mode: 'steal' } }, 'devop.json');
    expect(() => mergeExecOptions({ tlsSecret: ['api-tls'] }, whole, ['node'], '/project')).toThrow(
      '--tls-secret applies to a filtered steal only',
    );
    expect(() => mergeExecOptions({ tlsSecret: ['api-tls'], mirror: true }, fileConfig, ['node'], '/p')).toThrow(
      '--tls-secret applies to a filtered steal only',
    );
  });
});
