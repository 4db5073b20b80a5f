// `devop vscode init`: writes .vscode/tasks.json (a background `devop exec` task whose problem matcher waits for the
// real start and ready lines), .vscode/launch.json (a Node attach configuration around it) and devop.json's $schema —
// merging into existing files (JSON with comments, VS Code's format) without touching other entries or their comments.
import { existsSync, mkdirSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { basename, delimiter, join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import {
  applyEdits,
  findNodeAtLocation,
  format,
  modify,
  parse,
  parseTree,
  printParseErrorCode,
  type JSONPath,
  type ParseError,
} from 'jsonc-parser';
import { UserError } from '../../shared/errors.js';
import { CONFIG_FILE_NAME } from '../config/file-name.js';
import { BEGINS_PATTERN, ENDS_PATTERN, ERROR_PATTERN } from '../ui/lines.js';
import { SCHEMA_FILE_NAME, devopPackageRoot, schemaFilePath } from './config.js';

/** The schema path written when devop is a dependency of the workspace: stable across machines and checkouts. */
export const INSTALLED_SCHEMA_PATH = `./node_modules/devop/${SCHEMA_FILE_NAME}`;
/** Where the schema is copied when devop is not a dependency of the workspace (relative to devop.json). */
export const COPIED_SCHEMA_PATH = `./.vscode/${SCHEMA_FILE_NAME}`;
/** How the task runs the workspace's own devop install. */
const INSTALLED_BIN_PATH = '${workspaceFolder}/node_modules/devop/bin/devop.js';

export interface VscodeInitOptions {
  /** The folder that holds (or will hold) .vscode/ and devop.json. */
  workspace: string;
  /** `devop exec` flags to bake into the task (target, mode, ports, filters…), without --output. */
  execArgs: string[];
  /** The local command after `--`; empty: `node <package.json main>`. */
  localCommand: string[];
  /** How the task starts devop, e.g. ['devop'] (default: devopCommandFor, the devop that writes the task). */
  devopCommand?: string[];
  inspectPort: number;
  taskLabel: string;
}

export interface WrittenFile {
  path: string;
  action: 'created' | 'updated' | 'unchanged';
}

export interface VscodeInitResult {
  files: WrittenFile[];
  notes: string[];
  task: VscodeTask;
}

export interface VscodeTask {
  label: string;
  type: string;
  command: string;
  args?: string[];
  [key: string]: unknown;
}

export function stopTaskLabel(taskLabel: string): string {
  return taskLabel.replace(/exec$/, 'stop') === taskLabel ? `${taskLabel} (stop)` : taskLabel.replace(/exec$/, 'stop');
}

/** `node --inspect=PORT …` so the launch configuration can attach; other commands are left as they are. */
export function withInspect(command: string[], port: number): { command: string[]; inspected: boolean } {
  const [program, ...rest] = command;
  const isNode = program !== undefined && /^node(\.exe)?$/.test(basename(program));
  if (!isNode) return { command, inspected: false };
  if (rest.some((arg) => arg.startsWith('--inspect'))) return { command, inspected: true };
  return { command: [program, `--inspect=${port}`, ...rest], inspected: true };
}

/** The background task: VS Code waits for `devop: ready` (endsPattern) before the debugger attaches. */
export function buildExecTask(options: VscodeInitOptions, localCommand: string[]): VscodeTask {
  const [command, ...prefix] = options.devopCommand ?? devopCommandFor(options.workspace);
  const args = [...prefix, 'exec', ...options.execArgs, '--output', 'plain', '--', ...localCommand];
  return {
    label: options.taskLabel,
    detail: `devop exec ${[...options.execArgs, '--', ...localCommand].join(' ')}`,
    type: 'process',
    command,
    args,
    isBackground: true,
    options: { cwd: '${workspaceFolder}' },
    presentation: { reveal: 'always', panel: 'dedicated', clear: true },
    problemMatcher: {
      owner: 'devop',
      source: 'devop',
      fileLocation: ['relative', '${workspaceFolder}'],
      pattern: { regexp: ERROR_PATTERN, kind: 'file', file: 1, message: 2 },
      background: { activeBegins: true, beginsPattern: BEGINS_PATTERN, endsPattern: ENDS_PATTERN },
    },
  };
}

/** Ends the background task after debugging (VS Code's terminate command, fed the task's label through an input). */
export function buildStopTask(taskLabel: string): { task: VscodeTask; input: Record<string, unknown> } {
  const inputId = 'devopTerminate';
  return {
    task: {
      label: stopTaskLabel(taskLabel),
      type: 'shell',
      command: `echo \${input:${inputId}}`,
      problemMatcher: [],
      presentation: { reveal: 'never' },
    },
    input: { id: inputId, type: 'command', command: 'workbench.action.tasks.terminate', args: taskLabel },
  };
}

export function buildLaunchConfiguration(taskLabel: string, port: number): Record<string, unknown> {
  return {
    name: 'devop: attach',
    type: 'node',
    request: 'attach',
    port,
    preLaunchTask: taskLabel,
    postDebugTask: stopTaskLabel(taskLabel),
    skipFiles: ['<node_internals>/**'],
  };
}

export function initVscode(options: VscodeInitOptions): VscodeInitResult {
  const notes: string[] = [];
  const localCommand = options.localCommand.length > 0 ? options.localCommand : defaultLocalCommand(options.workspace);
  const inspected = withInspect(localCommand, options.inspectPort);
  if (!inspected.inspected)
    notes.push(
      `the local command does not start with node: give it --inspect=${options.inspectPort} yourself so "devop: ` +
        `attach" can attach`,
    );
  const task = buildExecTask(options, inspected.command);
  const stop = buildStopTask(options.taskLabel);
  const vscodeDir = join(options.workspace, '.vscode');

  // Every file is planned before any is written: a broken launch.json must not leave a half-done set-up behind.
  const tasksFile = planJsonFile(join(vscodeDir, 'tasks.json'), { version: '2.0.0' }, [
    { key: 'tasks', by: 'label', entries: [task, stop.task] },
    { key: 'inputs', by: 'id', entries: [stop.input] },
  ]);
  const launchFile = planJsonFile(join(vscodeDir, 'launch.json'), { version: '0.2.0' }, [
    { key: 'configurations', by: 'name', entries: [buildLaunchConfiguration(options.taskLabel, options.inspectPort)] },
  ]);
  const schema = schemaReference(options.workspace);
  const configFile = planDevopJson(join(options.workspace, CONFIG_FILE_NAME), schema.ref);
  const planned = [tasksFile, launchFile, configFile, ...(schema.copy ? [schema.copy] : [])];
  mkdirSync(vscodeDir, { recursive: true });
  for (const file of planned) {
    if (file.action !== 'unchanged') writeFileSync(file.path, file.text);
  }
  return { files: planned.map(({ path, action }) => ({ path, action })), notes, task };
}

function defaultLocalCommand(workspace: string): string[] {
  const packageJson = join(workspace, 'package.json');
  const main = existsSync(packageJson)
    ? (parseJsonc(readFileSync(packageJson, 'utf8'), packageJson) as { main?: unknown }).main
    : undefined;
  if (typeof main === 'string' && main !== '') return ['node', main];
  throw new UserError(
    'no local command to run under devop',
    'give it after --, e.g. `devop vscode init -t deploy/NAME -- node dist/main.js`',
  );
}

/**
 * How the task starts the devop that writes it: the workspace's own install, else `devop` when the one on PATH is this
 * one, else this one's bin by path. Never `npx devop`: without devop in node_modules, npx would fetch whatever package
 * the registry has under that name.
 */
export function devopCommandFor(workspace: string, root = devopPackageRoot(), pathEnv = process.env.PATH): string[] {
  const bin = join(root, 'bin', 'devop.js');
  // (VS Code substitutes ${workspaceFolder}: the path holds on every machine that clones the project)
  if (sameFile(join(workspace, 'node_modules', 'devop'), root)) return ['node', INSTALLED_BIN_PATH];
  const onPath = (pathEnv ?? '')
    .split(delimiter)
    .filter(Boolean)
    .map((dir) => join(dir, 'devop'))
    .find((file) => existsSync(file));
  if (onPath && sameFile(onPath, bin)) return ['devop'];
  return ['node', bin];
}

function sameFile(a: string, b: string): boolean {
  try {
    return realpathSync(a) === realpathSync(b);
  } catch {
    return false; // one of them does not exist
  }
}

/**
 * `./node_modules/devop/devop.schema.json` when the workspace has devop installed; else a copy of this devop's schema
 * in .vscode/ (a path into devop's own folder would not resolve on another machine or checkout).
 */
export function schemaReference(workspace: string): { ref: string; copy?: PlannedFile } {
  if (existsSync(join(workspace, INSTALLED_SCHEMA_PATH))) return { ref: INSTALLED_SCHEMA_PATH };
  const path = join(workspace, COPIED_SCHEMA_PATH);
  const text = readFileSync(schemaFilePath(), 'utf8');
  const before = existsSync(path) ? readFileSync(path, 'utf8') : undefined;
  const action = before === undefined ? 'created' : before === text ? 'unchanged' : 'updated';
  return { ref: COPIED_SCHEMA_PATH, copy: { path, action, text } };
}

interface PlannedFile extends WrittenFile {
  text: string;
}

function planDevopJson(path: string, schema: string): PlannedFile {
  if (!existsSync(path)) return { path, action: 'created', text: `${JSON.stringify({ $schema: schema }, null, 2)}\n` };
  const text = readFileSync(path, 'utf8');
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new UserError(
      `${path} is not valid JSON (${(err as Error).message})`,
      'fix it (devop config validate shows where), then run devop vscode init again',
    );
  }
  if (!isObject(doc))
    throw new UserError(`${path} does not hold a JSON object`, 'make it an object such as {"target": "deploy/NAME"}');
  if (doc.$schema === schema) return { path, action: 'unchanged', text };
  const { $schema: _old, ...rest } = doc;
  return { path, action: 'updated', text: `${JSON.stringify({ $schema: schema, ...rest }, null, 2)}\n` };
}

type JsonObject = Record<string, unknown>;

/** A list in a VS Code file whose entries devop owns by one key (tasks by label, configurations by name, …). */
interface OwnedEntries {
  key: string;
  by: string;
  entries: JsonObject[];
}

/** How VS Code itself writes these files (two spaces); new entries are indented to where they stand. */
const FORMATTING = { insertSpaces: true, tabSize: 2, eol: '\n' } as const;

/**
 * Plans `path` with devop's entries upserted: a new file is written whole; an existing one is edited in place, entry by
 * entry, so its comments, order and layout stay as the user left them.
 */
function planJsonFile(path: string, fresh: JsonObject, lists: OwnedEntries[]): PlannedFile {
  const exists = existsSync(path);
  const text = exists ? readFileSync(path, 'utf8') : '';
  if (!exists || text.trim() === '') {
    const doc: JsonObject = { ...fresh };
    for (const list of lists) doc[list.key] = upsert([], list.by, list.entries);
    return { path, action: exists ? 'updated' : 'created', text: `${JSON.stringify(doc, null, 2)}\n` };
  }
  let next = text;
  for (const list of lists) {
    for (const entry of list.entries) next = upsertEntry(next, path, list, entry);
  }
  return { path, action: next === text ? 'unchanged' : 'updated', text: next };
}

/** One entry into the text: replaces the entry with the same key (unless equal already) or appends it. */
function upsertEntry(text: string, file: string, list: OwnedEntries, entry: JsonObject): string {
  const doc = parseJsonc(text, file);
  if (!isObject(doc))
    throw new UserError(`${file} does not hold a JSON object`, `move it away and run devop vscode init again`);
  const items = arrayAt(doc, list.key, file);
  const at = items.findIndex((item) => isObject(item) && item[list.by] === entry[list.by]);
  if (at >= 0 && isDeepStrictEqual(items[at], entry)) return text;
  if (doc[list.key] === undefined) return edit(text, [list.key], [entry]);
  return at >= 0 ? edit(text, [list.key, at], entry) : edit(text, [list.key, items.length], entry, true);
}

/**
 * Sets `path` to `value` and lays out only the new text (from the end of the entry before it): formatting the whole
 * list, as modify() does when given formatting options, would re-indent the user's own entries too.
 */
function edit(text: string, path: JSONPath, value: unknown, isArrayInsertion = false): string {
  const next = applyEdits(text, modify(text, path, value, { isArrayInsertion }));
  const valueNode = findNodeAtLocation(parseTree(next)!, path)!;
  const node = valueNode.parent?.type === 'property' ? valueNode.parent : valueNode;
  const siblings = node.parent?.children ?? [];
  const before = siblings[siblings.indexOf(node) - 1];
  const start = before ? before.offset + before.length : (node.parent?.offset ?? -1) + 1;
  return applyEdits(next, format(next, { offset: start, length: node.offset + node.length - start }, FORMATTING));
}

function arrayAt(doc: JsonObject, key: string, file: string): unknown[] {
  const value = doc[key];
  if (value === undefined) return [];
  if (!Array.isArray(value))
    throw new UserError(
      `${file}: "${key}" is not a list`,
      `make "${key}" a JSON array (or remove it) and run devop vscode init again`,
    );
  return value;
}

/** Replaces the entries whose `key` matches one of `entries`, in place, and appends the others. */
export function upsert(list: unknown[], key: string, entries: Record<string, unknown>[]): unknown[] {
  const next = list.slice();
  for (const entry of entries) {
    const at = next.findIndex((item) => isObject(item) && item[key] === entry[key]);
    if (at >= 0) next[at] = entry;
    else next.push(entry);
  }
  return next;
}

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** JSON with comments and trailing commas, as VS Code writes and reads its settings files. */
export function parseJsonc(text: string, file: string): unknown {
  const errors: ParseError[] = [];
  const value: unknown = parse(text, errors, { allowTrailingComma: true, disallowComments: false });
  const first = errors[0];
  if (first) {
    const before = text.slice(0, first.offset).split('\n');
    const where = `line ${before.length} column ${(before.at(-1)?.length ?? 0) + 1}`;
    throw new UserError(
      `${file} is not valid JSON with comments (${printParseErrorCode(first.error)} at ${where})`,
      'fix the file (VS Code underlines the error) or move it away, then run devop vscode init again',
    );
  }
  return value;
}
