// Unit tests of the preload's routing decision: rules, the proxy itself, addresses handed out by the cluster's DNS, and
// the Node errors a failed dial turns into.
import { describe, expect, it } from 'vitest';
import { parseOutgoingFilter } from '../outgoing/filters.js';
import { createRouter, dialFailure, readPreloadConfig } from './hooks.js';

const proxy = { host: '127.0.0.1', port: 40000 };

describe('preload router', () => {
  it('sends cluster names to the cluster and keeps this machine local', () => {
    const router = createRouter(parseOutgoingFilter({ exclude: ['db.corp.test'] }), proxy);
    expect(router.route('echo.default', 80)).toBe('cluster');
    expect(router.route('10.96.0.10', 53)).toBe('cluster');
    expect(router.route('localhost', 80)).toBe('local');
    expect(router.route('127.0.0.1', proxy.port)).toBe('local');
    expect(router.route('DB.corp.test', 5432)).toBe('local');
  });

  it('routes an address that cluster DNS gave out even when only names are included', () => {
    // Given only *.svc.cluster.local goes to the cluster
    const router = createRouter(parseOutgoingFilter({ include: ['*.svc.cluster.local'] }), proxy);
    expect(router.route('10.96.7.7', 80)).toBe('local');
    // When the cluster's DNS answered 10.96.7.7 for a service name
    router.remember(['10.96.7.7']);
    // Then a connect to that address goes to the cluster; an explicit exclude still wins
    expect(router.route('10.96.7.7', 80)).toBe('cluster');
    const excluding = createRouter(
      parseOutgoingFilter({ include: ['*.svc.cluster.local'], exclude: ['10.96.0.0/12'] }),
      proxy,
    );
    excluding.remember(['10.96.7.7']);
    expect(excluding.route('10.96.7.7', 80)).toBe('local');
  });

  it('turns dial failures into the errors Node itself gives', () => {
    expect(dialFailure('ENOTFOUND', 'nosuch.default', 80)).toMatchObject({
      message: 'getaddrinfo ENOTFOUND nosuch.default',
      code: 'ENOTFOUND',
      errno: -3008,
      syscall: 'getaddrinfo',
      hostname: 'nosuch.default',
    });
    expect(dialFailure('ECONNREFUSED', 'echo.default', 9)).toMatchObject({
      message: 'connect ECONNREFUSED echo.default:9',
      code: 'ECONNREFUSED',
      errno: -111,
      syscall: 'connect',
      address: 'echo.default',
      port: 9,
    });
    expect(dialFailure('EAI_AGAIN', 'slow.default', 80)).toMatchObject({
      code: 'EAI_AGAIN',
      syscall: 'getaddrinfo',
      errno: -3001,
    });
  });

  it('reads its config from DEVOP_PRELOAD_CONFIG and ignores a missing or broken one', () => {
    const config = { proxy, include: [], exclude: ['*.corp'], token: 'session-secret' };
    expect(readPreloadConfig({ DEVOP_PRELOAD_CONFIG: JSON.stringify(config) })).toEqual(config);
    expect(readPreloadConfig({})).toBeUndefined();
    expect(readPreloadConfig({ DEVOP_PRELOAD_CONFIG: '{not json' })).toBeUndefined();
    expect(readPreloadConfig({ DEVOP_PRELOAD_CONFIG: '{"include":[]}' })).toBeUndefined();
    // Without the token it could not talk to the proxy: no hooks rather than failing connections
    const tokenless = JSON.stringify({ ...config, token: undefined });
    expect(readPreloadConfig({ DEVOP_PRELOAD_CONFIG: tokenless })).toBeUndefined();
  });
});
