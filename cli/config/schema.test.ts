// devop.json: defaults, a full valid file, errors naming key path + bad value + what is accepted, file loading, and the
// committed devop.schema.json being up to date with the zod schema.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { UserError } from '../../shared/errors.js';
import { SESSION_DEFAULTS } from '../session/connect.js';
import { envOverrides } from './env.js';
import { configJsonSchema, loadConfigFile, mergeConfigInput, parseConfig, parsePortMapping } from './schema.js';

const dir = mkdtempSync(join(tmpdir(), 'devop-config-test-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function userErrorOf(fn: () => unknown): UserError {
  try {
    fn();
  } catch (err) {
    if (err instanceof UserError) return err;
    throw err;
  }
  throw new Error('expected a UserError');
}

const FULL = {
  $schema: './devop.schema.json',
  target: 'deploy/farm-operator/container/main',
  namespace: 'farm',
  context: 'kind-dev',
  kubeconfig: '/home/me/.kube/config',
  incoming: {
    mode: 'steal',
    ports: [3000, '80:8080'],
    httpFilter: { header: 'x-devop-user: alice', path: '^/apis/', method: 'GET', match: 'any' },
    flush: false,
    stealProbes: true,
  },
  env: {
    include: ['*'],
    exclude: ['AWS_*'],
    allow: ['NODE_OPTIONS'],
    override: { LOG_LEVEL: 'debug' },
    file: '.env.devop',
  },
  agent: {
    image: 'ghcr.io/devop/agent:0.1.0',
    namespace: 'devop-system',
    ttlSeconds: 5,
    ephemeral: true,
    startupTimeoutSeconds: 120,
    labels: { team: 'farm' },
    annotations: { 'sidecar.istio.io/inject': 'false' },
    tolerations: [{ key: 'gpu', operator: 'Exists', effect: 'NoSchedule' }],
  },
  outgoing: {
    enabled: true,
    proxy: false,
    nodePreload: true,
    nativePreload: false,
    netns: true,
    include: ['*.svc.cluster.local'],
    exclude: ['10.0.0.0/8'],
  },
  dns: { enabled: false },
  remoteFiles: ['/var/run/secrets/kubernetes.io/serviceaccount/token'],
  allPods: true,
  allowHostNetwork: true,
  recordSecrets: true,
  shadow: { enabled: true, inCluster: true },
  replace: true,
  portForward: { local: ['18080:echo.default:80'], remote: ['8080:localhost:3000', '9090'] },
};

describe('parseConfig', () => {
  it("gives a session without devop.json (port-forward's) the same agent TTL and start-up timeout as exec's", () => {
    const defaults = parseConfig({}, 'defaults').agent;
    expect(SESSION_DEFAULTS.agentTtlSeconds).toBe(defaults.ttlSeconds);
    expect(SESSION_DEFAULTS.startupTimeoutMs).toBe(defaults.startupTimeoutSeconds * 1000);
  });

  it('fills every default for an empty config', () => {
    expect(parseConfig({}, 'devop.json')).toEqual({
      incoming: { mode: 'mirror', ports: [], flush: true, stealProbes: false },
      env: { include: ['*'], exclude: [], allow: [], override: {} },
      agent: {
        ttlSeconds: 30,
        ephemeral: false,
        startupTimeoutSeconds: 60,
        labels: {},
        annotations: {},
        tolerations: [],
      },
      outgoing: {
        enabled: true,
        proxy: true,
        nodePreload: true,
        nativePreload: true,
        netns: false,
        include: [],
        exclude: [],
      },
      dns: { enabled: true },
      remoteFiles: [],
      allPods: false,
      allowHostNetwork: false,
      recordSecrets: false,
      shadow: { enabled: false, inCluster: false },
      replace: false,
      portForward: { local: [], remote: [] },
    });
  });

  it('accepts a config that sets every key, unchanged', () => {
    expect(parseConfig(FULL, 'devop.json')).toEqual(FULL);
  });

  it('names the key path, the bad value and what is accepted', () => {
    const cases: Array<[unknown, string, string]> = [
      [{ incoming: { mode: 'stael' } }, 'devop.json: incoming.mode is "stael"', 'accepted: "steal" | "mirror"'],
      [{ incoming: { ports: [3000, 'http'] } }, 'devop.json: incoming.ports[1] is "http"', 'REMOTE[:LOCAL]'],
      [{ incoming: { ports: [70000] } }, 'devop.json: incoming.ports[0] is 70000', 'REMOTE[:LOCAL] with ports 1-65535'],
      [{ agent: { ttlSeconds: '5' } }, 'devop.json: agent.ttlSeconds is "5"', 'accepted: a number'],
      [{ agent: { ttlSeconds: -1 } }, 'devop.json: agent.ttlSeconds is -1', 'accepted: a number >= 0'],
      [{ target: 'service/web' }, 'devop.json: target is "service/web"', 'deploy/NAME'],
      [
        { incoming: { httpFilter: { path: '(' } } },
        'devop.json: incoming.httpFilter.path is "("',
        'valid regular expression',
      ],
      [
        { incoming: { httpFilter: { header: 'x-user' } } },
        'devop.json: incoming.httpFilter.header is "x-user"',
        'Header-Name: value-regex',
      ],
      [{ env: { include: 'A*' } }, 'devop.json: env.include is "A*"', 'accepted: a list (JSON array)'],
      [{ dns: { enabled: 'yes' } }, 'devop.json: dns.enabled is "yes"', 'accepted: a boolean'],
      [[], 'devop.json: (top level) is []', 'accepted: an object'],
    ];
    for (const [input, message, hint] of cases) {
      const err = userErrorOf(() => parseConfig(input, 'devop.json'));
      expect(err.message, JSON.stringify(input)).toContain(message);
      expect(err.hint, JSON.stringify(input)).toContain(hint);
    }
  });

  it('names an unknown key and lists the keys accepted at that level', () => {
    const top = userErrorOf(() => parseConfig({ tagret: 'pod/x' }, 'devop.json'));
    expect(top.message).toBe('devop.json: unknown key tagret');
    expect(top.hint).toContain('target, namespace, context');
    const nested = userErrorOf(() => parseConfig({ agent: { imag: 'x' } }, '--flags'));
    expect(nested.message).toBe('--flags: unknown key agent.imag');
    expect(nested.hint).toBe(
      'accepted keys in agent: image, namespace, ephemeral, ttlSeconds, startupTimeoutSeconds, labels, annotations, ' +
        'tolerations',
    );
  });

  it('says how many more problems there are', () => {
    const err = userErrorOf(() => parseConfig({ allPods: 1, dns: { enabled: 2 }, remoteFiles: 3 }, 'devop.json'));
    expect(err.message).toMatch(/\(and 2 more problems\)$/);
  });
});

describe('layers: file < environment < flags', () => {
  it('reads the documented environment overrides and merges layers key by key', () => {
    const env = envOverrides({
      DEVOP_TARGET: 'pod/web',
      DEVOP_MODE: 'steal',
      DEVOP_AGENT_EPHEMERAL: 'true',
      DEVOP_DNS: '0',
      HOME: '/root',
    });
    expect(env).toEqual({
      target: 'pod/web',
      incoming: { mode: 'steal' },
      agent: { ephemeral: true },
      dns: { enabled: false },
    });
    const file = { target: 'deploy/api', incoming: { ports: [3000], mode: 'mirror' }, env: { include: ['A*'] } };
    const flags = { incoming: { ports: [8080] } };
    const config = parseConfig(mergeConfigInput(file, env, flags), 'devop.json + env + flags');
    expect(config.target).toBe('pod/web');
    expect(config.incoming.mode).toBe('steal');
    expect(config.incoming.ports).toEqual([8080]);
    expect(config.env.include).toEqual(['A*']);
    expect(config.agent.ephemeral).toBe(true);
  });

  it('names a bad environment value', () => {
    const err = userErrorOf(() => envOverrides({ DEVOP_OUTGOING: 'maybe' }));
    expect(err.message).toBe('environment variable DEVOP_OUTGOING is "maybe"');
    expect(err.hint).toBe('set it to true or false (it overrides outgoing.enabled)');
  });
});

describe('parsePortMapping', () => {
  it('reads REMOTE[:LOCAL] and rejects anything else', () => {
    expect(parsePortMapping(3000)).toEqual({ remote: 3000, local: 3000 });
    expect(parsePortMapping('80:8080')).toEqual({ remote: 80, local: 8080 });
    for (const bad of ['0', '65536', '80:', ':80', 'a:b', '1:2:3', 3.5])
      expect(parsePortMapping(bad), String(bad)).toBeNull();
  });
});

describe('loadConfigFile', () => {
  it('loads and validates a file', () => {
    const path = join(dir, 'devop.json');
    writeFileSync(path, JSON.stringify({ target: 'pod/web', incoming: { mode: 'steal', ports: [8080] } }));
    const config = loadConfigFile(path);
    expect(config.target).toBe('pod/web');
    expect(config.incoming).toEqual({ mode: 'steal', ports: [8080], flush: true, stealProbes: false });
  });

  it('reports a missing file, bad JSON and a bad value with the file path', () => {
    const missing = userErrorOf(() => loadConfigFile(join(dir, 'nope.json')));
    expect(missing.message).toBe(`config file ${join(dir, 'nope.json')} does not exist`);
    expect(missing.hint).toMatch(/^check the path given to -f\/--config/);
    const broken = join(dir, 'broken.json');
    writeFileSync(broken, '{ "target": "pod/x", }');
    expect(userErrorOf(() => loadConfigFile(broken)).message).toMatch(/broken\.json is not valid JSON/);
    const bad = join(dir, 'bad.json');
    writeFileSync(bad, JSON.stringify({ incoming: { mode: 'copy' } }));
    expect(userErrorOf(() => loadConfigFile(bad)).message).toBe(`${bad}: incoming.mode is "copy"`);
  });
});

describe('docs/config.md', () => {
  it('shows only examples that are valid configs', () => {
    const doc = readFileSync(new URL('../../docs/config.md', import.meta.url), 'utf8');
    const examples = [...doc.matchAll(/```json\n([\s\S]*?)```/g)].map((m) => m[1]);
    expect(examples.length).toBeGreaterThan(0);
    for (const example of examples) expect(() => parseConfig(JSON.parse(example), 'docs/config.md')).not.toThrow();
  });
});

describe('devop.schema.json', () => {
  it('describes every key, with defaults where the config has them', () => {
    const schema = configJsonSchema() as {
      properties: Record<
        string,
        { description?: string; properties?: Record<string, { description?: string; default?: unknown }> }
      >;
    };
    for (const [key, prop] of Object.entries(schema.properties)) {
      expect(prop.description, key).toBeTruthy();
      for (const [sub, subProp] of Object.entries(prop.properties ?? {}))
        expect(subProp.description, `${key}.${sub}`).toBeTruthy();
    }
    expect(schema.properties.incoming.properties?.mode.default).toBe('mirror');
    expect(schema.properties.agent.properties?.ttlSeconds.default).toBe(30);
  });
});
