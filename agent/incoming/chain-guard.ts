// The guard: a tiny shell process, started detached in the agent's netns, that holds a pipe from the agent and removes
// the agent's iptables and ip6tables chains when that pipe closes — which happens however the agent dies, SIGKILL
// included. Used only with the iptables fallback: a runtime that kills the agent's whole cgroup kills the guard too
// (docs/safety.md).
import { spawn } from 'node:child_process';
import type { Writable } from 'node:stream';
import { IP_FAMILIES, iptablesBinary, isOwnChain, JUMP_WORDS, type IptablesBackend } from './iptables.js';
import type { AgentLog } from '../log.js';

/**
 * The guard's script, a constant: the chain and the iptables programs (one per IP family) reach it as its positional
 * parameters ($1, then the rest), which sh expands as words and never parses as code. For each program: -D removes one
 * copy per call, so loop until none is left (at most 64, as agent/incoming/iptables.ts's removeChain), then empty and
 * delete the chain. A program that is missing or has no such chain fails at once, and the loop moves on.
 */
export const GUARD_SCRIPT =
  `trap '' INT TERM HUP; cat >/dev/null; chain=$1; shift; for ipt in "$@"; do n=0; ` +
  `while [ $n -lt 64 ] && "$ipt" -w -t nat -D ${JUMP_WORDS.join(' ')} "$chain" 2>/dev/null; do n=$((n+1)); done; ` +
  `"$ipt" -w -t nat -F "$chain" 2>/dev/null; "$ipt" -w -t nat -X "$chain" 2>/dev/null; done; true`;

export interface Guard {
  pid: number;
  /** Closes the pipe: the guard runs its cleanup (idempotent) and exits. */
  release(): void;
}

/**
 * Starts the guard. It ignores INT/TERM/HUP (a signal to the agent's process group must not stop it before it cleaned
 * up), lives in its own session (setsid) so it outlives the agent, and waits for EOF on stdin — the agent holds the
 * only writer.
 */
export function startGuard(backend: IptablesBackend, chain: string, log: AgentLog): Guard {
  // An owned nft table needs no guard: the kernel removes it when the agent's devop-nft dies.
  if (backend === 'nft-owned') return { pid: -1, release: () => undefined };
  if (!isOwnChain(chain)) throw new Error(`refusing to guard "${chain}": not a devop chain name`);
  // GUARD_SCRIPT is a constant; "devop-guard" is its $0 (the name ps shows).
  const programs = IP_FAMILIES.map((family) => iptablesBinary(backend, family));
  const args = ['-c', GUARD_SCRIPT, 'devop-guard', chain, ...programs];
  const child = spawn('sh', args, { detached: true, stdio: ['pipe', 'ignore', 'ignore'] });
  const stdin = child.stdin as Writable & { unref?: () => void };
  stdin.on('error', () => undefined); // the guard died first: nothing more to do here
  child.on('error', (err) =>
    log.warn('cannot start the iptables guard; rules would outlive a killed agent', { error: err.message }),
  );
  // Neither the child nor its pipe may keep the agent's event loop alive.
  child.unref();
  (stdin as unknown as { _handle?: { unref?: () => void } })._handle?.unref?.();
  log.debug('guard started', { pid: child.pid, chain, backend });
  return {
    pid: child.pid ?? -1,
    release: () => stdin.end(),
  };
}
