// The agent's Node flags for a Node other than the image's (tests and benches run the agent on this machine's Node).
import { execFileSync } from 'node:child_process';
import { AGENT_NODE_FLAGS } from '../shared/agent-contract.js';

/**
 * `flags` for `node`: lite mode turns WebAssembly off, and a V8 that still has `--expose-wasm` on by default
 * (Node 20–22) then prints "Warning: disabling flag --expose_wasm due to conflicting flags" on every start;
 * `--no-expose-wasm` says the same up front and silences it (RSS unchanged: WebAssembly is off either way). The image's
 * Node 24 has no such flag and refuses it ("bad option"), so AGENT_NODE_FLAGS and agent/entry.sh stay without it.
 */
export function agentNodeFlagsFor(node: string, flags: readonly string[] = AGENT_NODE_FLAGS): string[] {
  if (!flags.includes('--lite-mode') || flags.includes('--no-expose-wasm')) return [...flags];
  const v8Options = execFileSync(node, ['--v8-options'], { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 });
  return /^\s+--expose-wasm\b/m.test(v8Options) ? [...flags, '--no-expose-wasm'] : [...flags];
}
