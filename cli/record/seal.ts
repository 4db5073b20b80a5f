// The seal that lets `devop replay FILE` send to the local ports a HAR names without --to: devop signs the ports of the
// HARs it writes with a key only this user can read, so a HAR from anyone else (or edited) names no port replay trusts.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

/** 256 bits: an HMAC-SHA256 key of the hash's own size. */
const KEY_BYTES = 32;

/** ~/.config/devop/har-key (or under $XDG_CONFIG_HOME): 0600 in a 0700 folder. */
export function sealKeyPath(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), '.config');
  return join(base, 'devop', 'har-key');
}

function readKey(path: string): Buffer | undefined {
  try {
    const key = readFileSync(path);
    return key.length === KEY_BYTES ? key : undefined;
  } catch {
    // No key yet (or unreadable): the caller makes one, or trusts no port.
    return undefined;
  }
}

/** This user's key, made on first use (exclusively, so two devops starting at once agree on one). */
export function sealKey(env: NodeJS.ProcessEnv = process.env): Buffer {
  const path = sealKeyPath(env);
  const existing = readKey(path);
  if (existing) return existing;
  mkdirSync(join(path, '..'), { recursive: true, mode: 0o700 });
  try {
    writeFileSync(path, randomBytes(KEY_BYTES), { flag: 'wx', mode: 0o600 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const key = readKey(path);
  if (!key) throw new Error(`${path} is not a devop HAR key (${KEY_BYTES} bytes): remove it`);
  return key;
}

function mac(key: Buffer, ports: readonly number[]): Buffer {
  return createHmac('sha256', key)
    .update(`devop-har-local-ports:${[...ports].sort((a, b) => a - b).join(',')}`)
    .digest();
}

/** The seal of a set of local ports. */
export function sealPorts(key: Buffer, ports: readonly number[]): string {
  return mac(key, ports).toString('base64url');
}

/** Whether `seal` is this user's seal of exactly `ports` (false when there is no key: nothing is trusted). */
export function portsSealed(ports: readonly number[], seal: unknown, env: NodeJS.ProcessEnv = process.env): boolean {
  if (typeof seal !== 'string') return false;
  const key = readKey(sealKeyPath(env));
  if (!key) return false;
  const expected = mac(key, ports);
  const given = Buffer.from(seal, 'base64url');
  return given.length === expected.length && timingSafeEqual(given, expected);
}
