// The flags as the last layer over devop.json: each lands on its key, and the devop.json schema checks it (same bound,
// same one-line error); durations read one way everywhere; a flag's help says what its key's doc says.
import { describe, expect, it } from 'vitest';
import { isUserError } from '../../shared/errors.js';
import { mergeExecOptions } from '../services/exec-options.js';
import { durationMs } from './duration.js';
import { withFlags } from './flags.js';
import { OPTIONS } from './options.js';
import { parseConfig } from './schema.js';

/** The error `run` throws, as the top-level handler prints it, without its source (a file or a flag). */
function refusal(run: () => unknown): { source: string; line: string } {
  try {
    run();
  } catch (err) {
    if (!isUserError(err)) throw err;
    const [, source, rest] = /^([^:]+): (.*)$/.exec(err.message) ?? [];
    return { source, line: `${rest} — fix: ${err.hint}` };
  }
  throw new Error('not refused');
}

describe('flags over devop.json', () => {
  const defaults = parseConfig({}, 'devop.json');

  it("refuses --agent-ttl 90000 with the line devop.json's agent.ttlSeconds 90000 gets", () => {
    // Given the bound devop.json enforces on agent.ttlSeconds (0–86400)
    const file = refusal(() => parseConfig({ agent: { ttlSeconds: 90000 } }, 'devop.json'));
    expect(file).toEqual({
      source: 'devop.json',
      line: 'agent.ttlSeconds is 90000 — fix: accepted: a number <= 86400',
    });
    // When the flag asks for the same, Then it is refused with the same line, naming the flag
    const flag = refusal(() => mergeExecOptions({ agentTtl: '90000' }, defaults, ['true']));
    expect(flag).toEqual({ ...file, source: '--agent-ttl' });
  });

  it('puts each given flag on its key: --steal on incoming.mode, durations in seconds, added lists once', () => {
    const file = parseConfig({ env: { exclude: ['A', 'B'] }, agent: { ttlSeconds: 5 } }, 'devop.json');
    const config = withFlags(file, {
      steal: true,
      mirror: false,
      agentTtl: '1500ms',
      startupTimeout: '1m30s',
      envExclude: ['B', 'C'],
      envInclude: [],
      flush: undefined,
    });
    expect(config.incoming.mode).toBe('steal');
    expect(config.agent.ttlSeconds).toBe(2);
    expect(config.agent.startupTimeoutSeconds).toBe(90);
    expect(config.env.exclude).toEqual(['A', 'B', 'C']);
    expect(config.env.include).toEqual(['*']);
    expect(config.incoming.flush).toBe(true);
    expect(withFlags(file, {})).toBe(file);
  });

  it("lets a filter flag replace the file's criteria, keeping its match", () => {
    const file = parseConfig({ incoming: { httpFilter: { header: 'x-user: bob', match: 'any' } } }, 'devop.json');
    expect(withFlags(file, { httpPathFilter: '^/api' }).incoming.httpFilter).toEqual({ path: '^/api', match: 'any' });
    expect(withFlags(file, {}).incoming.httpFilter).toEqual({ header: 'x-user: bob', match: 'any' });
  });

  it("refuses a flag the schema refuses in devop.json's words, naming the flag", () => {
    expect(refusal(() => withFlags(defaults, { startupTimeout: '2h' }))).toEqual({
      source: '--startup-timeout',
      line: 'agent.startupTimeoutSeconds is 7200 — fix: accepted: a number <= 3600',
    });
    expect(() => withFlags(defaults, { startupTimeout: 'soon' })).toThrow(/^--startup-timeout soon is not a duration$/);
    // A target or a request timeout keeps the wording its flag always had (devop ls reads the same)
    expect(() => withFlags(defaults, { target: 'nonsense' })).toThrow(/^invalid target "nonsense"/);
    expect(() => withFlags(defaults, { requestTimeout: 'soon' })).toThrow(
      /^invalid --request-timeout "soon": not a number of seconds or a duration$/,
    );
  });
});

describe('durations', () => {
  it("read every form the flags, --request-timeout and devop.json's requestTimeout took", () => {
    const forms: [string | number, number][] = [
      ['90', 90_000],
      ['1.5', 1_500],
      ['1500ms', 1_500],
      ['90s', 90_000],
      ['2m', 120_000],
      ['1h', 3_600_000],
      ['1m30s', 90_000],
      ['1.5s', 1_500],
      [' 10s ', 10_000],
      ['0', 0],
      [0, 0],
    ];
    for (const [text, ms] of forms) expect(durationMs(text), String(text)).toBe(ms);
    for (const bad of ['abc', '-1', '10x', '', 's', '1 m', '1.s', 'm1']) expect(durationMs(bad), bad).toBeUndefined();
  });
});

describe('help and doc', () => {
  it("say the same of --startup-timeout and agent.startupTimeoutSeconds: the agent, and the command's listen", () => {
    const { help, doc } = OPTIONS.startupTimeout;
    expect(doc.toLowerCase()).toContain(help);
    expect(help).toContain('the local command to listen');
  });
});
