// Where the shadow proxy sends each request, decided on the path as kube-apiserver parses it
// (k8s.io/apiserver pkg/endpoints/request/requestinfo.go), and the DeleteOptions body a DELETE carries upstream
// (pkg/endpoints/handlers/delete.go reads the body when there is one, the query otherwise).
import { describe, expect, it } from 'vitest';
import { dryRunDeleteBody, isReview, parseApiPath, routeRequest } from './policy.js';

const route = (method: string, path: string, headers: Record<string, string> = {}) =>
  routeRequest(method, path, headers);
const kind = (method: string, path: string, headers: Record<string, string> = {}) => route(method, path, headers).kind;

describe('shadow request routing', () => {
  it('parses resource paths: namespaced, cluster-scoped, subresources, a namespace and its status', () => {
    expect(parseApiPath('/apis/apps/v1/namespaces/ns/deployments/web/scale')).toEqual({
      group: 'apps',
      version: 'v1',
      namespace: 'ns',
      resource: 'deployments',
      name: 'web',
      subresource: 'scale',
    });
    expect(parseApiPath('/api/v1/nodes/n1')).toMatchObject({ group: '', resource: 'nodes', name: 'n1' });
    expect(parseApiPath('/api/v1/namespaces/ns')).toMatchObject({ resource: 'namespaces', name: 'ns' });
    expect(parseApiPath('/api/v1/namespaces/ns/status')).toMatchObject({
      resource: 'namespaces',
      name: 'ns',
      subresource: 'status',
    });
    expect(parseApiPath('/api/v1/nodes/n1/proxy/metrics')).toMatchObject({ subresource: 'proxy', extra: ['metrics'] });
    expect(parseApiPath('/api/v1/watch/namespaces/ns/pods')).toMatchObject({ pathVerb: 'watch', resource: 'pods' });
    // The decoded path is what the API server splits: an encoded slash is a subresource there
    expect(parseApiPath('/api/v1/namespaces/ns/pods/x%2Fexec')).toBeUndefined();
    expect(parseApiPath('/version')).toBeUndefined();
    // Only the built-in review kinds pass without dryRun; a custom resource named *reviews is stored, so it is not one
    expect(isReview(parseApiPath('/apis/authorization.k8s.io/v1/selfsubjectaccessreviews'))).toBe(true);
    expect(isReview(parseApiPath('/apis/authentication.k8s.io/v1/tokenreviews'))).toBe(true);
    expect(isReview(parseApiPath('/apis/authentication.k8s.io/v1/tokenreviews'), 'DELETE')).toBe(false);
    expect(isReview(parseApiPath('/apis/example.com/v1/namespaces/ns/codereviews'))).toBe(false);
  });

  it('passes reads, sends writes as dry runs and answers Leases from memory', () => {
    expect(kind('GET', '/api/v1/namespaces/ns/configmaps')).toBe('read');
    expect(kind('GET', '/api/v1/namespaces/ns/pods/p/log')).toBe('read');
    expect(kind('GET', '/version')).toBe('read');
    expect(route('POST', '/api/v1/namespaces/ns/configmaps')).toMatchObject({ kind: 'write', verb: 'create' });
    expect(route('POST', '/api/v1/namespaces/ns/pods/p/eviction')).toMatchObject({ kind: 'write', verb: 'create' });
    expect(route('DELETE', '/api/v1/namespaces/ns/configmaps/c')).toMatchObject({ kind: 'write', verb: 'delete' });
    expect(route('DELETE', '/api/v1/namespaces/ns/configmaps')).toMatchObject({ verb: 'deletecollection' });
    expect(route('PUT', '/api/v1/namespaces/ns/finalize')).toMatchObject({ kind: 'write', verb: 'update' });
    expect(kind('PUT', '/apis/coordination.k8s.io/v1/namespaces/ns/leases/l')).toBe('lease');
    expect(kind('GET', '/apis/coordination.k8s.io/v1/namespaces/ns/leases/l')).toBe('lease');
    expect(kind('GET', '/apis/coordination.k8s.io/v1/namespaces/ns/leases')).toBe('read');
    expect(kind('POST', '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews')).toBe('review');
  });

  it.each([
    ['a service-account token (minted even in a dry run)', 'POST', '/api/v1/namespaces/ns/serviceaccounts/sa/token'],
    ['a write to a non-resource path', 'PUT', '/debug/flags/v'],
    ['a write to discovery', 'POST', '/apis/apps/v1'],
    ['a read through a pod proxy', 'GET', '/api/v1/namespaces/ns/pods/p/proxy/'],
    ['a write through a service proxy', 'POST', '/api/v1/namespaces/ns/services/s:80/proxy/orders'],
    ["the kubelet's API through a node proxy", 'GET', '/api/v1/nodes/n/proxy/pods'],
    ['the old proxy verb path', 'GET', '/api/v1/proxy/namespaces/ns/pods/p'],
    ['pods/exec', 'POST', '/api/v1/namespaces/ns/pods/p/exec'],
    ['pods/attach', 'GET', '/api/v1/namespaces/ns/pods/p/attach'],
    ['pods/portforward', 'GET', '/api/v1/namespaces/ns/pods/p/portforward'],
    ['an encoded slash that the API server splits (pods/x%2Fexec)', 'POST', '/api/v1/namespaces/ns/pods/x%2Fexec'],
    ['an encoded slash on a read', 'GET', '/api/v1/namespaces/ns/pods/x%2Fproxy'],
    ['a dot segment', 'GET', '/api/v1/namespaces/ns/pods/p/%2e%2e/x'],
    ['an empty segment', 'DELETE', '/api/v1/namespaces//configmaps/c'],
    ['a write under a path verb', 'POST', '/api/v1/watch/namespaces/ns/configmaps'],
    ['a write with segments after the subresource', 'PUT', '/api/v1/namespaces/ns/configmaps/c/status/x'],
    ['a method that is neither a read nor a write', 'TRACE', '/api/v1/namespaces/ns/configmaps'],
    ['a method named like an object property', 'constructor', '/api/v1/namespaces/ns/configmaps'],
  ])('refuses %s with a 403 that names it', (_what, method, path) => {
    const answer = route(method, path);
    expect(answer).toMatchObject({ kind: 'refuse', code: 403 });
    expect((answer as { message: string }).message).toMatch(/^devop --shadow [^\n]+$/);
  });

  it('refuses any request that impersonates, reads included', () => {
    expect(route('GET', '/api/v1/secrets', { 'impersonate-user': 'admin' })).toMatchObject({
      kind: 'refuse',
      code: 403,
      message: expect.stringContaining('impersonate-user'),
    });
  });
});

describe('DeleteOptions sent upstream', () => {
  const none = new URLSearchParams();
  const json = (answer: ReturnType<typeof dryRunDeleteBody>) =>
    JSON.parse('body' in answer ? answer.body.toString() : '');

  it("keeps the client's options and puts dryRun All in the body, whatever dryRun it had (any spelling)", () => {
    const body = Buffer.from(
      JSON.stringify({ kind: 'DeleteOptions', apiVersion: 'v1', propagationPolicy: 'Foreground', dryRun: ['Bogus'] }),
    );
    expect(json(dryRunDeleteBody('application/json', body, none))).toEqual({
      kind: 'DeleteOptions',
      apiVersion: 'v1',
      propagationPolicy: 'Foreground',
      dryRun: ['All'],
    });
    const shouting = Buffer.from('{"DryRun":[],"dryrun":[]}');
    expect(json(dryRunDeleteBody(undefined, shouting, none))).toEqual({ dryRun: ['All'] });
  });

  it("without a body, makes one from the query's options", () => {
    const query = new URLSearchParams('propagationPolicy=Background&gracePeriodSeconds=0&labelSelector=a%3Db');
    expect(json(dryRunDeleteBody(undefined, Buffer.alloc(0), query))).toEqual({
      propagationPolicy: 'Background',
      gracePeriodSeconds: 0,
      dryRun: ['All'],
    });
  });

  it('refuses a body it cannot rewrite: protobuf or YAML with 415, broken JSON with 400', () => {
    expect(dryRunDeleteBody('application/vnd.kubernetes.protobuf', Buffer.from('k8s\0'), none)).toMatchObject({
      code: 415,
      message: expect.stringContaining('application/json'),
    });
    expect(dryRunDeleteBody('application/yaml', Buffer.from('dryRun: []'), none)).toMatchObject({ code: 415 });
    expect(dryRunDeleteBody('application/json', Buffer.from('[1]'), none)).toMatchObject({ code: 400 });
    expect(dryRunDeleteBody('application/json', Buffer.from('{'), none)).toMatchObject({ code: 400 });
  });
});
