// `devop vscode init`: tasks.json / launch.json merged into existing (commented) files without clobbering other
// entries, devop.json's $schema pointing at the committed schema, and problem-matcher patterns that match devop's Plain
// lines.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve, sep } from 'node:path';
import { parse as parseJsonc } from 'jsonc-parser';
import { afterAll, describe, expect, it } from 'vitest';
import { DEVOP_BIN, REPO_ROOT, runCli } from './helpers/cli.js';
import { runNode } from '../../testkit/processes.js';

const dir = mkdtempSync(join(tmpdir(), 'devop-ui-vscode-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface TasksJson {
  version: string;
  tasks: Array<
    Record<string, unknown> & {
      label: string;
      args?: string[];
      problemMatcher?: {
        pattern: { regexp: string; file: number; message: number };
        background: { beginsPattern: string; endsPattern: string };
      };
    }
  >;
  inputs: Array<Record<string, unknown>>;
}

/** The environment with a PATH that holds node and nothing called devop. */
const NO_DEVOP_ON_PATH = { ...process.env, PATH: dirname(process.execPath) };

function workspace(name: string): string {
  const path = join(dir, name);
  mkdirSync(join(path, '.vscode'), { recursive: true });
  return path;
}

describe('devop vscode init', () => {
  it('merges into existing JSONC files, keeps other entries, and sets $schema', async () => {
    // Given a workspace whose tasks.json (with comments and trailing commas) and launch.json hold other entries
    const ws = workspace('merge');
    writeFileSync(
      join(ws, '.vscode', 'tasks.json'),
      '{\n  // See https://go.microsoft.com/fwlink/?LinkId=733558\n  "version": "2.0.0",\n  "tasks": [\n    { ' +
        '"label": "build", "type": "npm", "script": "build", /* keep me */ },\n  ],\n  "inputs": [{ "id": "mine", ' +
        '"type": "promptString" }],\n}\n',
    );
    writeFileSync(
      join(ws, '.vscode', 'launch.json'),
      JSON.stringify({ version: '0.2.0', configurations: [{ name: 'tests', type: 'node', request: 'launch' }] }),
    );
    writeFileSync(join(ws, 'devop.json'), JSON.stringify({ target: 'deploy/echo', incoming: { mode: 'steal' } }));
    // When vscode init runs with exec flags and a local command
    const result = await runCli(
      [
        'vscode',
        'init',
        '--dir',
        ws,
        '-t',
        'deploy/echo',
        '--steal',
        '-p',
        '3000',
        '--env-exclude',
        'AWS_*',
        '--',
        'node',
        'server.js',
      ],
      { env: NO_DEVOP_ON_PATH },
    );
    expect(result.code, result.stderr).toBe(0);
    // Then tasks.json holds the old task, the old input, the devop task and its stop task
    const tasksText = readFileSync(join(ws, '.vscode', 'tasks.json'), 'utf8');
    const tasks = parseJsonc(tasksText) as TasksJson;
    expect(tasks.tasks.map((task) => task.label)).toEqual(['build', 'devop: exec', 'devop: stop']);
    expect(tasks.tasks[0]).toEqual({ label: 'build', type: 'npm', script: 'build' });
    expect(tasks.inputs.map((input) => input.id)).toEqual(['mine', 'devopTerminate']);
    const exec = tasks.tasks[1];
    expect(exec.isBackground).toBe(true);
    // (run by the devop that wrote it, by path: it is neither installed in the workspace nor on PATH)
    expect(exec.command).toBe('node');
    expect(exec.args).toEqual([
      DEVOP_BIN,
      'exec',
      '--target',
      'deploy/echo',
      '--steal',
      '--port',
      '3000',
      '--env-exclude',
      'AWS_*',
      '--output',
      'plain',
      '--',
      'node',
      '--inspect=9229',
      'server.js',
    ]);
    // And the user's comments stay where they were, with no backup file beside it
    expect(tasksText).toMatch(
      /^\{\n {2}\/\/ See https:\/\/go\.microsoft\.com\/fwlink\/\?LinkId=733558\n {2}"version": "2\.0\.0",/,
    );
    expect(tasksText).toContain('{ "label": "build", "type": "npm", "script": "build", /* keep me */ }');
    expect(existsSync(join(ws, '.vscode', 'tasks.json.devop.bak'))).toBe(false);
    // And launch.json has both configurations, the devop one attaching around the task
    const launch = JSON.parse(readFileSync(join(ws, '.vscode', 'launch.json'), 'utf8')) as {
      configurations: Array<Record<string, unknown>>;
    };
    expect(launch.configurations.map((c) => c.name)).toEqual(['tests', 'devop: attach']);
    expect(launch.configurations[1]).toMatchObject({
      type: 'node',
      request: 'attach',
      port: 9229,
      preLaunchTask: 'devop: exec',
      postDebugTask: 'devop: stop',
    });
    // And devop.json keeps its keys and gets a $schema that resolves to the committed schema
    const config = JSON.parse(readFileSync(join(ws, 'devop.json'), 'utf8')) as Record<string, unknown>;
    expect(config).toMatchObject({ target: 'deploy/echo', incoming: { mode: 'steal' } });
    expect(Object.keys(config)[0]).toBe('$schema');
    // (a file inside the workspace: a path into devop's own folder would not resolve on another machine)
    expect(config.$schema).toBe('./.vscode/devop.schema.json');
    const schemaPath = resolve(ws, String(config.$schema));
    expect(schemaPath.startsWith(ws + sep)).toBe(true);
    expect(readFileSync(schemaPath, 'utf8')).toBe(readFileSync(join(REPO_ROOT, 'devop.schema.json'), 'utf8'));
    // And the result lines say what was done
    expect(result.stdout).toMatch(/updated .*tasks\.json\n/);

    // When it runs again with the same flags
    const again = await runCli(
      [
        'vscode',
        'init',
        '--dir',
        ws,
        '-t',
        'deploy/echo',
        '--steal',
        '-p',
        '3000',
        '--env-exclude',
        'AWS_*',
        '--',
        'node',
        'server.js',
      ],
      { env: NO_DEVOP_ON_PATH },
    );
    // Then nothing changes
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(
      /unchanged .*tasks\.json\nunchanged .*launch\.json\nunchanged .*devop\.json\nunchanged .*devop\.schema\.json/,
    );
  });

  it(
    'runs the devop that wrote the task: `devop` when it is the one on PATH, the workspace install when it is ' +
      'that',
    async () => {
      // Given this devop on PATH (as a global install links it)
      const bin = join(dir, 'global-bin');
      mkdirSync(bin, { recursive: true });
      symlinkSync(DEVOP_BIN, join(bin, 'devop'));
      const ws = workspace('global');
      // When vscode init runs
      const global = await runCli(['vscode', 'init', '--dir', ws, '-t', 'pod/app', '--', 'node', 'main.js'], {
        env: { ...process.env, PATH: `${bin}:${dirname(process.execPath)}` },
      });
      expect(global.code, global.stderr).toBe(0);
      // Then the task runs `devop` itself
      const globalTask = (JSON.parse(readFileSync(join(ws, '.vscode', 'tasks.json'), 'utf8')) as TasksJson).tasks[0];
      expect([globalTask.command, globalTask.args?.[0]]).toEqual(['devop', 'exec']);

      // Given a workspace whose node_modules/devop is this devop (npm link, or an install)
      const local = workspace('local-install');
      mkdirSync(join(local, 'node_modules'));
      symlinkSync(REPO_ROOT, join(local, 'node_modules', 'devop'));
      // When vscode init runs (with this devop on PATH too)
      const installed = await runCli(['vscode', 'init', '--dir', local, '-t', 'pod/app', '--', 'node', 'main.js'], {
        env: { ...process.env, PATH: `${bin}:${dirname(process.execPath)}` },
      });
      expect(installed.code, installed.stderr).toBe(0);
      // Then the task runs the workspace's install, by a path that holds on every machine
      const localTask = (JSON.parse(readFileSync(join(local, '.vscode', 'tasks.json'), 'utf8')) as TasksJson).tasks[0];
      expect([localTask.command, ...(localTask.args ?? []).slice(0, 2)]).toEqual([
        'node',
        '${workspaceFolder}/node_modules/devop/bin/devop.js',
        'exec',
      ]);
      expect(JSON.parse(readFileSync(join(local, 'devop.json'), 'utf8'))).toEqual({
        $schema: './node_modules/devop/devop.schema.json',
      });
      expect(existsSync(join(local, '.vscode', 'devop.schema.json'))).toBe(false);
    },
  );

  it('points $schema into node_modules when devop is installed in the workspace', async () => {
    // Given a workspace with devop in node_modules and no devop.json
    const ws = workspace('installed');
    mkdirSync(join(ws, 'node_modules', 'devop'), { recursive: true });
    writeFileSync(join(ws, 'node_modules', 'devop', 'devop.schema.json'), '{}');
    // When vscode init runs (local command from package.json main)
    writeFileSync(join(ws, 'package.json'), JSON.stringify({ name: 'app', main: 'dist/main.js' }));
    const result = await runCli(['vscode', 'init', '--dir', ws, '-t', 'pod/app']);
    expect(result.code, result.stderr).toBe(0);
    // Then devop.json is created with the installed schema path and the task runs node <main> with the inspector
    expect(JSON.parse(readFileSync(join(ws, 'devop.json'), 'utf8'))).toEqual({
      $schema: './node_modules/devop/devop.schema.json',
    });
    const tasks = JSON.parse(readFileSync(join(ws, '.vscode', 'tasks.json'), 'utf8')) as TasksJson;
    expect(tasks.tasks[0].args?.slice(-3)).toEqual(['node', '--inspect=9229', 'dist/main.js']);
  });

  it("takes every exec flag (exec's own definitions) and writes them into the task in the table's order", async () => {
    // Given a workspace
    const ws = workspace('all-flags');
    // When vscode init runs with flags that only exec's table has (vscode init once kept its own, shorter copy)
    const flags = [
      '--all-pods',
      '--no-outgoing',
      '--request-timeout',
      '5s',
      '--outgoing-include',
      '*.svc',
      '-v',
      '--no-flush',
    ];
    const result = await runCli(['vscode', 'init', '--dir', ws, '-t', 'pod/app', ...flags, '--', 'node', 'a.js']);
    expect(result.code, result.stderr).toBe(0);
    // Then the task passes them to exec, by long name, in the options table's order
    const tasks = JSON.parse(readFileSync(join(ws, '.vscode', 'tasks.json'), 'utf8')) as TasksJson;
    const args = tasks.tasks[0].args ?? [];
    expect(args.slice(args.indexOf('exec') + 1, args.indexOf('--output'))).toEqual([
      '--target',
      'pod/app',
      '--request-timeout',
      '5s',
      '--no-flush',
      '--outgoing-include',
      '*.svc',
      '--no-outgoing',
      '--all-pods',
      '--verbose',
    ]);
  });

  it('refuses clearly when tasks.json cannot be parsed, and leaves it alone', async () => {
    // Given a broken tasks.json
    const ws = workspace('broken');
    const broken = '{ "version": "2.0.0", "tasks": [ { "label": "x" } \n';
    writeFileSync(join(ws, '.vscode', 'tasks.json'), broken);
    // When vscode init runs
    const result = await runCli(['vscode', 'init', '--dir', ws, '-t', 'pod/app', '--', 'node', 'a.js']);
    // Then it fails with one line naming the file and the fix, and the file is untouched
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/tasks\.json is not valid JSON with comments/);
    expect(result.stderr).toMatch(/fix: /);
    expect(readFileSync(join(ws, '.vscode', 'tasks.json'), 'utf8')).toBe(broken);
    expect(existsSync(join(ws, '.vscode', 'launch.json'))).toBe(false);
  });

  it('its begins/ends patterns match the lines the Plain reporter prints for a real start-up sequence', async () => {
    // Given the generated task
    const ws = workspace('patterns');
    await runCli(['vscode', 'init', '--dir', ws, '-t', 'deploy/echo', '--', 'node', 'a.js']);
    const { background, pattern } = (JSON.parse(readFileSync(join(ws, '.vscode', 'tasks.json'), 'utf8')) as TasksJson)
      .tasks[0].problemMatcher!;
    // When the Plain reporter prints the exec service's start-up sequence (piped: not a terminal)
    const run = await runNode(['--import', 'tsx', 'test/ui/fixtures/replay.ts', '--output', 'auto']);
    const lines = run.stderr.split('\n').filter(Boolean);
    // Then the begins pattern matches the first line, and the ends pattern exactly one later line: `devop: ready`
    const begins = new RegExp(background.beginsPattern);
    const ends = new RegExp(background.endsPattern);
    expect(lines[0]).toMatch(begins);
    const endLines = lines.filter((line) => ends.test(line));
    expect(endLines).toEqual(['devop: ready']);
    expect(lines.findIndex((line) => ends.test(line))).toBeGreaterThan(0);
    // And the problem pattern (file, message: what VS Code requires) matches none of a good run's lines
    expect(pattern.file).toBeGreaterThan(0);
    expect(lines.filter((line) => new RegExp(pattern.regexp).test(line))).toEqual([]);

    // When a start-up fails
    const failed = await runNode(['--import', 'tsx', 'test/ui/fixtures/replay.ts', '--output', 'auto', '--fail']);
    // Then the problem pattern picks the failed step and the error, with their messages
    const problems = failed.stderr
      .split('\n')
      .map((line) => new RegExp(pattern.regexp).exec(line))
      .filter((match) => match !== null)
      .map((match) => match[pattern.message]);
    expect(problems).toEqual([
      'agent: image pull failed (3.0 s)',
      'the agent pod cannot pull ghcr.io/devop/agent:nope — fix: pass --agent-image with an image your cluster can ' +
        'pull',
    ]);
  });
});
