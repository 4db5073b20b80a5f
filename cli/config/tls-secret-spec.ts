// A `--tls-secret` value, `[PORT=]NAME`: checked the same way as a flag and as the devop.json key
// incoming.httpFilter.tlsSecret (schema.ts). Imports nothing heavy: the config check loads it.
import { UserError } from '../../shared/errors.js';

/** One `--tls-secret` value: the Secret for one port, or (no port) for every filtered port. */
export interface TlsSecretSpec {
  port?: number;
  name: string;
}

/** A Secret's name (a DNS subdomain, RFC 1123: what Kubernetes accepts), with an optional `PORT=` before it. */
const SPEC = /^(?:(\d{1,5})=)?([a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?)$/;

/** Whether a `[PORT=]NAME` is well formed (the devop.json check, cli/config/schema.ts). */
export function isTlsSecretSpec(text: string): boolean {
  const m = SPEC.exec(text);
  return m !== null && (m[1] === undefined || (Number(m[1]) >= 1 && Number(m[1]) <= 65535));
}

export function parseTlsSecretSpec(text: string): TlsSecretSpec {
  const m = SPEC.exec(text);
  if (!m || !isTlsSecretSpec(text))
    throw new UserError(
      `--tls-secret "${text}" is not "[PORT=]NAME"`,
      'pass the name of a kubernetes.io/tls Secret, e.g. --tls-secret api-tls or --tls-secret 8443=api-tls',
    );
  return { ...(m[1] !== undefined ? { port: Number(m[1]) } : {}), name: m[2] };
}
