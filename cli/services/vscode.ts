// `devop vscode init`: writes .vscode/tasks.json (a background `devop exec` task whose problem matcher waits for the
// real start and ready lines), .vscode/launch.json (a Node attach configuration around it) and devop.json's $schema —
// merging into existing files (JSON with comments accepted) without touching other entries.
import { existsSync, mkdirSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { basename, delimiter, join } from 'node:path';
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
  /** Set when the file had comments: the original is kept here (the merged file is plain JSON). */
  backup?: string;
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
    task: { label: stopTaskLabel(taskLabel), type: 'shell', command: `echo \${input:${inputId}}`, problemMatcher: [], presentation: { reveal: 'never' } },
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
  if (!inspected.inspected) notes.push(`the local command does not start with node: give it --inspect=${options.inspectPort} yourself so "devop: attach" can attach`);
  const task = buildExecTask(options, inspected.command);
  const stop = buildStopTask(options.taskLabel);
  const vscodeDir = join(options.workspace, '.vscode');

  // Every file is planned before any is written: a broken launch.json must not leave a half-done set-up behind.
  const tasksFile = planJsonFile(join(vscodeDir, 'tasks.json'), { version: '2.0.0' }, (doc, file) => {
    doc.tasks = upsert(arrayAt(doc, 'tasks', file), 'label', [task, stop.task]);
    doc.inputs = upsert(arrayAt(doc, 'inputs', file), 'id', [stop.input]);
  });
  const launchFile = planJsonFile(join(vscodeDir, 'launch.json'), { version: '0.2.0' }, (doc, file) => {
    doc.configurations = upsert(arrayAt(doc, 'configurations', file), 'name', [buildLaunchConfiguration(options.taskLabel, options.inspectPort)]);
  });
  const schema = schemaReference(options.workspace);
  const configFile = planDevopJson(join(options.workspace, CONFIG_FILE_NAME), schema.ref);
  const planned = [tasksFile, launchFile, configFile, ...(schema.copy ? [schema.copy] : [])];
  mkdirSync(vscodeDir, { recursive: true });
  for (const file of planned) {
    if (file.backup && file.original !== undefined) writeFileSync(file.backup, file.original);
    if (file.action !== 'unchanged') writeFileSync(file.path, file.text);
  }
  return { files: planned.map(({ path, action, backup }) => ({ path, action, backup })), notes, task };
}

function defaultLocalCommand(workspace: string): string[] {
  const packageJson = join(workspace, 'package.json');
  const main = existsSync(packageJson) ? (parseJsonc(readFileSync(packageJson, 'utf8'), packageJson) as { main?: unknown }).main : undefined;
  if (typeof main === 'string' && main !== '') return ['node', main];
  throw new UserError('no local command to run under devop', 'give it after --, e.g. `devop vscode init -t deploy/NAME -- node dist/main.js`');
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
  original?: string;
}

function planDevopJson(path: string, schema: string): PlannedFile {
  if (!existsSync(path)) return { path, action: 'created', text: `${JSON.stringify({ $schema: schema }, null, 2)}\n` };
  const text = readFileSync(path, 'utf8');
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new UserError(`${path} is not valid JSON (${(err as Error).message})`, 'fix it (devop config validate shows where), then run devop vscode init again');
  }
  if (!isObject(doc)) throw new UserError(`${path} does not hold a JSON object`, 'make it an object such as {"target": "deploy/NAME"}');
  if (doc.$schema === schema) return { path, action: 'unchanged', text };
  const { $schema: _old, ...rest } = doc;
  return { path, action: 'updated', text: `${JSON.stringify({ $schema: schema, ...rest }, null, 2)}\n` };
}

type JsonObject = Record<string, unknown>;

function planJsonFile(path: string, fresh: JsonObject, change: (doc: JsonObject, file: string) => void): PlannedFile {
  const exists = existsSync(path);
  const text = exists ? readFileSync(path, 'utf8') : '';
  const parsed: unknown = exists && text.trim() !== '' ? parseJsonc(text, path) : { ...fresh };
  if (!isObject(parsed)) throw new UserError(`${path} does not hold a JSON object`, `move it away and run devop vscode init again`);
  const doc: JsonObject = { ...parsed };
  change(doc, path);
  const next = `${JSON.stringify(doc, null, 2)}\n`;
  if (exists && next === text) return { path, action: 'unchanged', text };
  const backup = exists && hasComments(text) ? `${path}.devop.bak` : undefined;
  return { path, action: exists ? 'updated' : 'created', text: next, backup, original: backup ? text : undefined };
}

function arrayAt(doc: JsonObject, key: string, file: string): unknown[] {
  const value = doc[key];
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new UserError(`${file}: "${key}" is not a list`, `make "${key}" a JSON array (or remove it) and run devop vscode init again`);
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
  const plain = stripTrailingCommas(stripComments(text));
  try {
    return JSON.parse(plain);
  } catch (err) {
    throw new UserError(`${file} is not valid JSON with comments (${(err as Error).message})`, 'fix the file (VS Code underlines the error) or move it away, then run devop vscode init again');
  }
}

function hasComments(text: string): boolean {
  return stripComments(text) !== text;
}

/** Removes line and block comments outside strings (replaced by spaces, so positions in errors stay right). */
export function stripComments(text: string): string {
  let out = '';
  let i = 0;
  while (i < text.length) {
    const char = text[i];
    if (char === '"') {
      const end = stringEnd(text, i);
      out += text.slice(i, end);
      i = end;
    } else if (char === '/' && text[i + 1] === '/') {
      const end = text.indexOf('\n', i);
      const stop = end < 0 ? text.length : end;
      out += ' '.repeat(stop - i);
      i = stop;
    } else if (char === '/' && text[i + 1] === '*') {
      const end = text.indexOf('*/', i + 2);
      const stop = end < 0 ? text.length : end + 2;
      out += text.slice(i, stop).replace(/[^\n]/g, ' ');
      i = stop;
    } else {
      out += char;
      i += 1;
    }
  }
  return out;
}

function stripTrailingCommas(text: string): string {
  let out = '';
  let i = 0;
  while (i < text.length) {
    const char = text[i];
    if (char === '"') {
      const end = stringEnd(text, i);
      out += text.slice(i, end);
      i = end;
      continue;
    }
    if (char === ',') {
      let j = i + 1;
      while (j < text.length && /\s/.test(text[j])) j += 1;
      if (text[j] === '}' || text[j] === ']') {
        out += ' ';
        i += 1;
        continue;
      }
    }
    out += char;
    i += 1;
  }
  return out;
}

/** Index just after the string literal that starts at `start` (a `"`), honouring backslash escapes. */
function stringEnd(text: string, start: number): number {
  let i = start + 1;
  while (i < text.length) {
    if (text[i] === '\\') i += 2;
    else if (text[i] === '"') return i + 1;
    else i += 1;
  }
  return text.length;
}
