// Writes what is generated from the options table (cli/config/options.ts): devop.schema.json (the JSON Schema editors
// use for devop.json), the tables of docs/config.md, the flag table of docs/exec.md and the `devop config validate`
// example of docs/ui.md (between their markers; the prose around them is kept).
// Run: npm run schema (or with --check: exit 1 when a committed file is stale).
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { configSection, EXEC_HELP_GROUPS, EXEC_OPTIONS, OPTIONS, type OptionSpec } from '../cli/config/options.js';
import { configJsonSchema, configProblems, formatConfigProblem } from '../cli/config/schema.js';

export const SCHEMA_PATH = fileURLToPath(new URL('../devop.schema.json', import.meta.url));
export const CONFIG_DOC_PATH = fileURLToPath(new URL('../docs/config.md', import.meta.url));
export const EXEC_DOC_PATH = fileURLToPath(new URL('../docs/exec.md', import.meta.url));
export const UI_DOC_PATH = fileURLToPath(new URL('../docs/ui.md', import.meta.url));

/** The exact text devop.schema.json must hold. */
export function renderSchema(): string {
  return `${JSON.stringify(configJsonSchema(), null, 2)}\n`;
}

const SPECS = Object.values(OPTIONS) as OptionSpec[];

const TYPE_NAMES: Record<OptionSpec['type'], string> = {
  string: 'string',
  boolean: 'boolean',
  integer: 'integer',
  number: 'number',
  enum: 'string',
  strings: 'list of string',
  paths: 'list of string',
  map: 'object',
  target: 'string',
  kubeDuration: 'string',
  portMappings: 'list of port mappings',
  headerFilter: 'string',
  bodyFilter: 'string',
  tlsSecrets: 'list of string',
  regex: 'string',
  httpMethod: 'string',
  tolerations: 'list of object',
};

/** Table cells may not hold a bare `|`. */
const cell = (text: string): string => text.replace(/\|/g, '\\|');
const code = (text: string): string => `\`${text}\``;

function longFlag(spec: OptionSpec): string | undefined {
  return spec.flags?.match(/--[\w-]+/)?.[0];
}

function defaultOf(spec: OptionSpec): string {
  const value = spec.default ?? spec.unsetDefault;
  return value !== undefined ? code(JSON.stringify(value)) : (spec.defaultText ?? '—');
}

function keyRow(spec: OptionSpec & { key: string }): string {
  const type = spec.type === 'enum' ? `string (${(spec.values ?? []).map(code).join(' | ')})` : TYPE_NAMES[spec.type];
  const byDefault = defaultOf(spec);
  const flags = SPECS.filter((s) => (s === spec || s.sets === spec.key) && s.flags).map((s) => code(longFlag(s) ?? ''));
  const env = spec.env ? code(spec.env) : '';
  const cells = [code(spec.key), cell(type), cell(byDefault), flags.join(' '), env, cell(spec.doc ?? '')];
  return `| ${cells.join(' | ')} |`;
}

function keysTable(): string {
  const rows = ['| key | type | default | flag | env | meaning |', '| --- | --- | --- | --- | --- | --- |'];
  const shown = new Set<string>();
  for (const spec of SPECS) {
    if (spec.key === undefined) continue;
    // A section's row comes before its first key.
    const segments = spec.key.split('.');
    for (let i = 1; i < segments.length; i += 1) {
      const section = segments.slice(0, i).join('.');
      if (shown.has(section)) continue;
      shown.add(section);
      const { doc, optional } = configSection(section) ?? { doc: '' };
      rows.push(`| ${code(section)} | object | ${optional ? '—' : code('{}')} |  |  | ${cell(doc)} |`);
    }
    rows.push(keyRow(spec as OptionSpec & { key: string }));
  }
  return rows.join('\n');
}

function envTable(): string {
  const rows = ['| variable | key |', '| --- | --- |'];
  for (const spec of SPECS) {
    if (spec.env === undefined || spec.key === undefined) continue;
    rows.push(`| ${code(spec.env)} | ${code(spec.key)}${spec.type === 'boolean' ? ' (true/false)' : ''} |`);
  }
  return rows.join('\n');
}

/** `devop exec`'s flags as --help lists them (by group), with the devop.json key each sets and its default. */
function execFlagsTable(): string {
  const rows = ['| flag | devop.json | default | meaning |', '| --- | --- | --- | --- |'];
  for (const group of Object.keys(EXEC_HELP_GROUPS)) {
    for (const name of EXEC_OPTIONS) {
      const spec: OptionSpec = OPTIONS[name];
      if (spec.group !== group) continue;
      const key = spec.key ?? spec.sets;
      const keyed = key === undefined ? spec : (SPECS.find((s) => s.key === key) ?? spec);
      const cells = [code(spec.flags ?? ''), key ? code(key) : '—', cell(defaultOf(keyed)), cell(spec.help ?? '')];
      rows.push(`| ${cells.join(' | ')} |`);
    }
  }
  return rows.join('\n');
}

/** A devop.json with a bad mode, port and TTL and an unknown key, whose problems docs/ui.md shows. */
const BAD_CONFIG = { incoming: { mode: 'stael', ports: [3000, 70000] }, agent: { ttlSeconds: -5 }, colour: 'blue' };

/**
 * What `devop config validate` prints for BAD_CONFIG, as a code block in docs/ui.md's list (indented two spaces): the
 * unknown key's line lists every top-level key, so the doc's list is the table's.
 */
function validateExample(): string {
  const lines = configProblems(BAD_CONFIG).map((problem) => `  ${formatConfigProblem(problem, 'devop.json')}`);
  return ['  ```', ...lines, '  ```'].join('\n');
}

const CONFIG_TABLES: Record<string, () => string> = { keys: keysTable, env: envTable };
const EXEC_TABLES: Record<string, () => string> = { 'exec-flags': execFlagsTable };
const UI_TABLES: Record<string, () => string> = { 'validate-example': validateExample };

/** docs/config.md with its generated tables up to date (the text between the `<!-- generated: NAME -->` markers). */
export function renderConfigDoc(current: string): string {
  return renderTables(current, CONFIG_TABLES, 'docs/config.md');
}

/** docs/exec.md with its generated flag table up to date. */
export function renderExecDoc(current: string): string {
  return renderTables(current, EXEC_TABLES, 'docs/exec.md');
}

/** docs/ui.md with its `devop config validate` example up to date. */
export function renderUiDoc(current: string): string {
  return renderTables(current, UI_TABLES, 'docs/ui.md');
}

function renderTables(current: string, tables: Record<string, () => string>, file: string): string {
  let text = current;
  for (const [name, render] of Object.entries(tables)) {
    const begin = `<!-- generated: ${name} (npm run schema) -->\n`;
    const end = `<!-- end generated: ${name} -->`;
    const from = text.indexOf(begin);
    const to = text.indexOf(end);
    if (from < 0 || to < from) {
      throw new Error(`${file} lacks the markers of the ${name} table: ${begin.trim()} … ${end}`);
    }
    // An end marker indented into a list item keeps its indentation.
    const indent = /[ ]*$/.exec(text.slice(0, to))?.[0] ?? '';
    text = `${text.slice(0, from + begin.length)}${render()}\n${indent}${text.slice(to)}`;
  }
  return text;
}

function main(): void {
  const configDoc = readFileSync(CONFIG_DOC_PATH, 'utf8');
  const execDoc = readFileSync(EXEC_DOC_PATH, 'utf8');
  const uiDoc = readFileSync(UI_DOC_PATH, 'utf8');
  const files = [
    { path: SCHEMA_PATH, text: renderSchema(), current: readOrEmpty(SCHEMA_PATH) },
    { path: CONFIG_DOC_PATH, text: renderConfigDoc(configDoc), current: configDoc },
    { path: EXEC_DOC_PATH, text: renderExecDoc(execDoc), current: execDoc },
    { path: UI_DOC_PATH, text: renderUiDoc(uiDoc), current: uiDoc },
  ];
  if (process.argv.includes('--check')) {
    const stale = files.filter((file) => file.current !== file.text);
    for (const file of stale) console.error(`${file.path} is stale: run npm run schema`);
    if (stale.length > 0) process.exit(1);
    return;
  }
  for (const file of files) {
    writeFileSync(file.path, file.text);
    console.log(`wrote ${file.path}`);
  }
}

function readOrEmpty(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    // missing counts as stale
    return '';
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) main();
