// The pod's default gateway, where kubelet's probes come from on most CNIs: read from /proc/net/route, else (an
// IPv6-only pod) from /proc/net/ipv6_route, in the kernel's own text formats.
import { describe, expect, test } from 'vitest';
import { gatewayOf } from './ports.js';

const ROUTE = [
  'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT',
  'eth0\t00000000\t0102F40A\t0003\t0\t0\t0\t00000000\t0\t0\t0',
  'eth0\t0002F40A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0',
].join('\n');
/** Lines of /proc/net/ipv6_route: destination, length, source, length, next hop, metric, counts, flags, device. */
const ipv6Route = (dest: string, length: string, nextHop: string) =>
  `${dest} ${length} ${'0'.repeat(32)} 00 ${nextHop} 00000400 00000002 00000000 00000003     eth0`;
const IPV6_ROUTE = [
  ipv6Route('fd000244000000020000000000000000', '40', '0'.repeat(32)),
  ipv6Route('0'.repeat(32), '00', 'fd000244000000020000000000000001'),
].join('\n');

describe('the default gateway', () => {
  test('IPv4 first, from /proc/net/route (little-endian hex)', () => {
    expect(gatewayOf(ROUTE, IPV6_ROUTE)).toBe('10.244.2.1');
  });

  test('an IPv6-only pod: the next hop of the ::/0 route, as Node writes addresses', () => {
    expect(gatewayOf('Iface\tDestination\tGateway', IPV6_ROUTE)).toBe('fd00:244:0:2::1');
  });

  test('no default route of either family: none', () => {
    expect(gatewayOf('', IPV6_ROUTE.split('\n')[0])).toBeUndefined();
  });
});
