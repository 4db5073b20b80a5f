// Writes devop.schema.json (the JSON Schema editors use for devop.json) from the zod config in shared/config.ts.
// Run: npx tsx scripts/gen-schema.ts (or with --check: exit 1 when the committed file is stale).
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { configJsonSchema } from '../cli/config/schema.js';

export const SCHEMA_PATH = fileURLToPath(new URL('../devop.schema.json', import.meta.url));

/** The exact text devop.schema.json must hold. */
export function renderSchema(): string {
  return `${JSON.stringify(configJsonSchema(), null, 2)}\n`;
}

function main(): void {
  const text = renderSchema();
  if (process.argv.includes('--check')) {
    let current = '';
    try {
      current = readFileSync(SCHEMA_PATH, 'utf8');
    } catch {
      // missing counts as stale
    }
    if (current !== text) {
      console.error('devop.schema.json is stale: run npx tsx scripts/gen-schema.ts');
      process.exit(1);
    }
    return;
  }
  writeFileSync(SCHEMA_PATH, text);
  console.log(`wrote ${SCHEMA_PATH}`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) main();
