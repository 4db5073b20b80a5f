// Unit tests of DNS as the pod sees it: resolv.conf and hosts parsing, and the search order.
import { describe, expect, test } from 'vitest';
import { candidates, parseHosts, parseResolvConf } from './dns.js';

describe('pod DNS rules', () => {
  test('resolv.conf: nameservers, search, ndots; hosts file', () => {
    const conf = parseResolvConf(
      '# c\nnameserver 10.96.0.10\nnameserver 10.96.0.11\nsearch ns.svc.cluster.local svc.cluster.local ' +
        'cluster.local\noptions ndots:5 timeout:1\n',
    );
    expect(conf).toEqual({
      nameservers: ['10.96.0.10', '10.96.0.11'],
      search: ['ns.svc.cluster.local', 'svc.cluster.local', 'cluster.local'],
      ndots: 5,
    });
    const hosts = parseHosts('127.0.0.1 localhost\n::1 localhost ip6-localhost # c\n10.0.0.5 Web web.local\n');
    expect(hosts.get('localhost')).toEqual([
      { address: '127.0.0.1', family: 4 },
      { address: '::1', family: 6 },
    ]);
    expect(hosts.get('web')).toEqual([{ address: '10.0.0.5', family: 4 }]);
  });
  test('search order follows ndots; a trailing dot is absolute', () => {
    const conf = { nameservers: [], search: ['a.svc', 'svc'], ndots: 2 };
    expect(candidates('db', conf)).toEqual(['db.a.svc', 'db.svc', 'db']);
    expect(candidates('x.y.z', conf)).toEqual(['x.y.z', 'x.y.z.a.svc', 'x.y.z.svc']);
    expect(candidates('db.', conf)).toEqual(['db']);
  });
});
