// What npm run schema generates from the options table (cli/config/options.ts) is committed up to date:
// devop.schema.json, docs/config.md's tables, docs/exec.md's flag table and docs/ui.md's `devop config validate`
// example.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  CONFIG_DOC_PATH,
  EXEC_DOC_PATH,
  renderConfigDoc,
  renderExecDoc,
  renderSchema,
  renderUiDoc,
  SCHEMA_PATH,
  UI_DOC_PATH,
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

  it("docs/ui.md's devop config validate example lists every devop.json key (regenerate: npm run schema)", () => {
    // Given the committed docs/ui.md
    const committed = readFileSync(UI_DOC_PATH, 'utf8');
    // Then its example is what devop config validate prints now, so the unknown key's line lists every top-level key
    expect(committed, 'docs/ui.md is stale: run npm run schema').toBe(renderUiDoc(committed));
    expect(committed).toMatch(/colour is not a devop\.json key — accepted: .*requestTimeout.*shadow, replace/);
  });

  it('devop.schema.json is up to date with the options table (regenerate: npm run schema)', () => {
    const committed = readFileSync(SCHEMA_PATH, 'utf8');
    expect(committed, 'devop.schema.json is stale: run npm run schema').toBe(renderSchema());
  });
});
