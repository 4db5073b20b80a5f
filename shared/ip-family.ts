// What kind of IP address a string is, as net.isIP answers it, without compiling Node's IPv6 regex: that costs ~9 ms
// the first time (Node 20 on a 2-core machine), and devop's outgoing rules, which hold this machine's addresses, would
// pay it on every start of a machine with an IPv6 address.
import { isIPv4, SocketAddress } from 'node:net';

/** The characters net.isIPv6 accepts in a zone id (`fe80::1%eth0`). */
const ZONE_ID = /^[0-9a-zA-Z.:-]+$/;

/** 4, 6 or 0, as net.isIP: an IPv6 address is checked by the C parser behind net.SocketAddress. */
export function ipFamily(address: string): 0 | 4 | 6 {
  if (!address.includes(':')) return isIPv4(address) ? 4 : 0;
  const zone = address.indexOf('%');
  if (zone >= 0 && !ZONE_ID.test(address.slice(zone + 1))) return 0;
  try {
    new SocketAddress({ address, family: 'ipv6' });
    return 6;
  } catch {
    return 0;
  }
}
