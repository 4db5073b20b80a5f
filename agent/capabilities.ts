// The agent's own Linux capabilities, read from /proc/self/status: a feature whose capability the container lacks (a
// policy, a webhook or a runtime removed it) fails with one line that names it, instead of a tool's EPERM later on.
import { readFileSync } from 'node:fs';
import type { AgentCapability } from '../shared/agent-contract.js';
import { UserError } from '../shared/errors.js';

/** Bit numbers of the capabilities the agent uses (linux/capability.h). */
export const CAPABILITY_BITS: Record<AgentCapability, number> = {
  DAC_READ_SEARCH: 2,
  NET_ADMIN: 12,
  NET_RAW: 13,
  SYS_PTRACE: 19,
  SYS_ADMIN: 21,
};

/** The capabilities among the agent's that a CapEff mask (hex, as in /proc/PID/status) holds. */
export function capabilitiesIn(capEffHex: string): Set<AgentCapability> {
  const mask = BigInt(`0x${capEffHex.trim() || '0'}`);
  const held = new Set<AgentCapability>();
  for (const [name, bit] of Object.entries(CAPABILITY_BITS) as Array<[AgentCapability, number]>) {
    if (mask & (1n << BigInt(bit))) held.add(name);
  }
  return held;
}

/** The effective capabilities of a process (default: this one), as far as the agent's are concerned. */
export function effectiveCapabilities(
  statusText: string = readFileSync('/proc/self/status', 'utf8'),
): Set<AgentCapability> {
  return capabilitiesIn(/^CapEff:\s*([0-9a-f]+)/m.exec(statusText)?.[1] ?? '0');
}

/** The error of a feature that cannot run without `missing`. */
export function missingCapabilityError(missing: readonly AgentCapability[], feature: string): UserError {
  const names = missing.map((c) => `CAP_${c}`).join(' and ');
  return new UserError(
    `the agent's container lacks ${names}, which ${feature} needs`,
    `allow ${missing.join(', ')} in the agent's securityContext: devop asks for it, but a pod security policy, an ` +
      `admission ` +
      'webhook or the runtime removed it (docs/agent.md lists what each capability is for); or pass --agent-privileged',
  );
}

/** Throws the one-line error when the agent lacks any of `needed` for `feature`. */
export function requireCapabilities(
  held: ReadonlySet<AgentCapability>,
  needed: readonly AgentCapability[],
  feature: string,
): void {
  const missing = needed.filter((c) => !held.has(c));
  if (missing.length > 0) throw missingCapabilityError(missing, feature);
}

/** Capabilities that let the agent read another user's /proc entries and files. */
const READ_CAPABILITIES: readonly AgentCapability[] = ['SYS_PTRACE', 'DAC_READ_SEARCH'];

/**
 * The one-line error for a read of the target's /proc entries or files that the kernel refused (EACCES/EPERM) while the
 * agent lacks a capability that would allow it; undefined when the failure has another cause.
 */
export function deniedByCapabilities(
  err: unknown,
  feature: string,
  held: ReadonlySet<AgentCapability> = effectiveCapabilities(),
): UserError | undefined {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  if (code !== 'EACCES' && code !== 'EPERM') return undefined;
  const missing = READ_CAPABILITIES.filter((c) => !held.has(c));
  return missing.length > 0 ? missingCapabilityError(missing, feature) : undefined;
}
