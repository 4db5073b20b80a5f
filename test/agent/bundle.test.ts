// The agent bundle runs in V8's lite mode, which has no WebAssembly. From Node 22 the ES module view of node:http reads
// every export, the lazy WebSocket one too, which loads undici and compiles its WebAssembly parser: an agent that
// imports node:http dies at start there (checked by hand with Node 22.23.3 from the npm registry). The agent suites run
// the bundle on this machine's Node; this checks what a newer one would trip on (scripts/build.mjs).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { AGENT_BUNDLE } from './netns.js';

describe('the agent bundle', () => {
  it('takes node:http and node:https through require(), never as ES modules', () => {
    const bundle = readFileSync(AGENT_BUNDLE, 'utf8');
    expect(bundle.match(/from\s*["']node:https?["']|import\(\s*["']node:https?["']\s*\)/g) ?? []).toEqual([]);
    expect(bundle).toMatch(/\(\s*"node:http"\s*\)/);
    expect(bundle).toMatch(/\(\s*"node:https"\s*\)/);
  });
});
