// ipFamily answers as net.isIP does, for addresses, names and the malformed strings in between.
import { isIP } from 'node:net';
import { describe, expect, it } from 'vitest';
import { ipFamily } from './ip-family.js';

const CASES = [
  '127.0.0.1',
  '10.1.2.3',
  '256.1.1.1',
  '1.2.3',
  '01.2.3.4',
  'localhost',
  'api.example.com',
  '',
  '::',
  '::1',
  'fd00::2',
  '2001:db8::1',
  '1:2:3:4:5:6:7:8',
  '1:2:3:4:5:6:7:8:9',
  '1::2::3',
  '12345::1',
  ':::',
  '::ffff:10.1.2.3',
  '::ffff:10.1.2.300',
  'fe80::1%eth0',
  'fe80::1%1',
  'fe80::1%',
  'fe80::1%a b',
  'fe80::1%eth0%1',
  '[::1]',
  '::1 ',
  ' ::1',
  '2001:db8::1/64',
  'a:b',
  'g::1',
  '::1:2:3:4:5:6:7',
  '1:2:3:4:5:6:7::',
  '1:2:3:4:5:6::8',
  '::ffff:1.2.3.4:5',
];

describe('ipFamily', () => {
  it.each(CASES)('Given %j, Then it answers as net.isIP', (text) => {
    expect(ipFamily(text)).toBe(isIP(text));
  });
});
