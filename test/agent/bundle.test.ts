// The agent bundle runs in V8's lite mode, which has no WebAssembly. From Node 22 the ES module view of node:http reads
// every export, the lazy WebSocket one too, which loads undici and compiles its WebAssembly parser: an agent that
// imports node:http dies at start there (checked by hand with Node 22.23.3 from the npm registry). The agent suites run
// the bundle on this machine's Node; this checks what a newer one would trip on (scripts/build.mjs), and what the agent
// loads before it is asked for anything: every module loaded is RSS for the agent's whole life.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { AGENT_ENV, TARGET_PID_ARG } from '../../shared/agent-contract.js';
import { agentNodeFlagsFor } from '../../testkit/agent-flags.js';
import { AGENT_BUNDLE } from '../../testkit/netns.js';

describe('the agent bundle', () => {
  it("is CommonJS and takes Node's modules through require(), never as ES modules", () => {
    const bundle = readFileSync(AGENT_BUNDLE, 'utf8');
    expect(bundle.startsWith('"use strict";')).toBe(true);
    const esm = bundle.match(/\bfrom\s*["']node:[a-z_/]+["']|\bimport\s*\(|\bimport\.meta\b/g) ?? [];
    expect(esm).toEqual([]);
    for (const name of ['node:http', 'node:https', 'node:net', 'node:crypto'])
      expect(bundle).toContain(`(${JSON.stringify(name)})`);
  });

  it('leaves HTTP, TLS, DNS queries and node:fs/promises unloaded until a feature needs them', () => {
    // The PID lookup evaluates the whole bundle and exits: what it loaded, any agent loads at start.
    const dir = mkdtempSync(join(tmpdir(), 'devop-bundle-'));
    try {
      const report = join(dir, 'report.cjs');
      const out = join(dir, 'modules.txt');
      writeFileSync(
        report,
        `process.on('exit', () => require('node:fs').writeFileSync(${JSON.stringify(out)}, ` +
          `process.moduleLoadList.join('\\n')));`,
      );
      const env = {
        ...process.env,
        [AGENT_ENV.token]: 'test-token',
        [AGENT_ENV.mode]: 'job',
        [AGENT_ENV.targetPid]: String(process.pid),
      };
      const pid = execFileSync(
        process.execPath,
        [...agentNodeFlagsFor(process.execPath), '--require', report, AGENT_BUNDLE, TARGET_PID_ARG],
        { env, encoding: 'utf8' },
      );
      expect(pid.trim()).toBe(String(process.pid));
      const loaded = readFileSync(out, 'utf8').split('\n');
      // Sanity: the list is the one of Node's modules, with what the agent does need.
      expect(loaded).toContain('NativeModule net');
      expect(loaded).toContain('NativeModule child_process');
      // HTTP and HTTP/2: filtered steals and mirrors; TLS: the replace guard; DNS: the first query; fs/promises: never
      // (agent/fs-calls.ts).
      const heavy = [
        'http',
        'http2',
        'https',
        'tls',
        '_http_server',
        'internal/crypto/webcrypto',
        'fs/promises',
        'dns/promises',
      ];
      for (const name of heavy) expect(loaded).not.toContain(`NativeModule ${name}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
