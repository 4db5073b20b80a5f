// Unit tests of the outgoing rules: parsing (and its errors), matching by host glob, CIDR and port, routing, NO_PROXY.
import { describe, expect, it } from 'vitest';
import {
  FilterSyntaxError,
  noProxyEntries,
  parseOutgoingFilter,
  parseOutgoingRule,
  routeOf,
  ruleMatches,
} from './filters.js';

describe('outgoing rules', () => {
  it('parses hosts, globs, IPs, CIDRs and ports', () => {
    // Given rules in every accepted form / When parsed / Then each has the right kind and port range
    expect(parseOutgoingRule('db.prod')).toMatchObject({ kind: 'host', glob: 'db.prod' });
    expect(parseOutgoingRule('*.svc.cluster.local:443')).toMatchObject({ kind: 'host', ports: { from: 443, to: 443 } });
    expect(parseOutgoingRule('10.0.0.0/8')).toMatchObject({ kind: 'cidr', family: 4, prefix: 8 });
    expect(parseOutgoingRule('10.1.2.3')).toMatchObject({ kind: 'cidr', family: 4, prefix: 32 });
    expect(parseOutgoingRule('fd00::/8')).toMatchObject({ kind: 'cidr', family: 6, prefix: 8 });
    expect(parseOutgoingRule('[fd00::1]/64:80-90')).toMatchObject({
      kind: 'cidr',
      family: 6,
      prefix: 64,
      ports: { from: 80, to: 90 },
    });
    expect(parseOutgoingRule(':5432')).toMatchObject({ kind: 'port', ports: { from: 5432, to: 5432 } });
    expect(parseOutgoingRule('*:8000-8999')).toMatchObject({ kind: 'port', ports: { from: 8000, to: 8999 } });
  });

  it('rejects malformed rules with the reason', () => {
    for (const [rule, why] of [
      ['', /empty/],
      ['10.0.0.0/33', /prefix length/],
      ['db:http', /not a port/],
      ['db:70000', /1\.\.65535/],
      ['db:90-80', /low-high/],
      ['bad host!', /letters, digits/],
      ['name/8', /not an IP address/],
      ['*', /needs a host/],
      ['[::1', /missing "]"/],
    ] as const) {
      expect(() => parseOutgoingRule(rule), rule).toThrow(FilterSyntaxError);
      expect(() => parseOutgoingRule(rule), rule).toThrow(why);
    }
  });

  it('matches hosts case-insensitively with globs, CIDRs by prefix, and ports by range', () => {
    expect(ruleMatches(parseOutgoingRule('*.svc.cluster.local'), 'Echo.Default.SVC.cluster.local', 80)).toBe(true);
    expect(ruleMatches(parseOutgoingRule('*.svc.cluster.local'), 'svc.cluster.local.evil', 80)).toBe(false);
    expect(ruleMatches(parseOutgoingRule('10.96.0.0/12'), '10.111.1.1', 80)).toBe(true);
    expect(ruleMatches(parseOutgoingRule('10.96.0.0/12'), '10.112.0.1', 80)).toBe(false);
    expect(ruleMatches(parseOutgoingRule('10.96.0.0/12'), '::ffff:10.100.0.1', 80)).toBe(true);
    expect(ruleMatches(parseOutgoingRule('fd00::/8'), 'fd12:3456::1', 80)).toBe(true);
    expect(ruleMatches(parseOutgoingRule('fd00::/8'), 'fe80::1', 80)).toBe(false);
    expect(ruleMatches(parseOutgoingRule('db:5432'), 'db', 5432)).toBe(true);
    expect(ruleMatches(parseOutgoingRule('db:5432'), 'db', 5433)).toBe(false);
    expect(ruleMatches(parseOutgoingRule(':8000-8999'), 'anything', 8080)).toBe(true);
    // A name never matches a CIDR: it is not an address yet.
    expect(ruleMatches(parseOutgoingRule('10.0.0.0/8'), 'ten.example', 80)).toBe(false);
  });

  it('routes everything but loopback and the excludes through the cluster by default', () => {
    // Given no include rules and one user exclude
    const filter = parseOutgoingFilter({ exclude: ['*.corp.example', ':5432'] });
    // Then loopback stays local, excludes stay local, the rest goes to the cluster
    expect(routeOf(filter, 'localhost', 80)).toBe('local');
    expect(routeOf(filter, '127.0.0.1', 80)).toBe('local');
    expect(routeOf(filter, '127.9.9.9', 80)).toBe('local');
    expect(routeOf(filter, '::1', 80)).toBe('local');
    expect(routeOf(filter, 'api.corp.example', 443)).toBe('local');
    expect(routeOf(filter, 'db.default', 5432)).toBe('local');
    expect(routeOf(filter, 'echo.default', 80)).toBe('cluster');
    expect(routeOf(filter, '10.96.0.10', 53)).toBe('cluster');
  });

  it('with include rules routes only what they name, and exclude still wins', () => {
    const filter = parseOutgoingFilter({
      include: ['*.svc.cluster.local', '10.96.0.0/12'],
      exclude: ['secret.ns.svc.cluster.local'],
    });
    expect(routeOf(filter, 'echo.default.svc.cluster.local', 80)).toBe('cluster');
    expect(routeOf(filter, '10.96.3.4', 80)).toBe('cluster');
    expect(routeOf(filter, 'registry.npmjs.org', 443)).toBe('local');
    expect(routeOf(filter, 'secret.ns.svc.cluster.local', 80)).toBe('local');
    // Even an include cannot send loopback to the cluster.
    expect(routeOf(parseOutgoingFilter({ include: ['127.0.0.0/8'] }), '127.0.0.1', 80)).toBe('local');
  });

  it('turns host and CIDR excludes into NO_PROXY entries', () => {
    expect(noProxyEntries(['*.corp.example', '10.0.0.0/8', 'db:5432', ':443', 'fd00::/8', '10.1.2.3'])).toEqual([
      'localhost',
      '127.0.0.1',
      '::1',
      '.corp.example',
      '10.0.0.0/8',
      'db',
      'fd00::/8',
      '10.1.2.3',
    ]);
  });
});
