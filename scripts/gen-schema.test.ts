// What npm run schema generates from the options table (cli/config/options.ts) is committed up to date:
// devop.schema.json, docs/config.md's tables and docs/exec.md's flag table.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  CONFIG_DOC_PATH,
  EXEC_DOC_PATH,
  renderConfigDoc,
  renderExecDoc,
  renderSchema,
  SCHEMA_PATH,
} from './gen-schema.js';

describe('files generated from the options table', () => {
  it('docs/config.md has its key and environment tables up to date with the options table (regenerate: npm run schema)', () => {
    const committed = readFileSync(CONFIG_DOC_PATH, 'utf8');
    expect(committed, 'docs/config.md is stale: run npm run schema').toBe(renderConfigDoc(committed));
    expect(committed).toContain('| `agent.ttlSeconds` | integer | `30` | `--agent-ttl` |');
  });

  it("has docs/exec.md's flag table up to date with the options table (regenerate: npm run schema)", () => {
    const committed = readFileSync(EXEC_DOC_PATH, 'utf8');
    expect(committed, 'docs/exec.md is stale: run npm run schema').toBe(renderExecDoc(committed));
    expect(committed).toContain('| `--agent-ttl <seconds>` | `agent.ttlSeconds` | `30` |');
  });

  it('devop.schema.json is up to date with the options table (regenerate: npm run schema)', () => {
    const committed = readFileSync(SCHEMA_PATH, 'utf8');
    expect(committed, 'devop.schema.json is stale: run npm run schema').toBe(renderSchema());
  });
});
