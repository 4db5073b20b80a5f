// `devop exec` against the stand-in with its output piped: Plain lines without escape codes, `--output json` NDJSON
// with a ready event, and the task that `devop vscode init` writes: run as VS Code would, its begins/ends patterns
// match what devop really prints.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import {
  DevopRun,
  LOCAL_SERVER,
  deployEcho,
  startE2ECluster,
  startPodClient,
  type Cluster,
  type EchoDeployment,
  type PodClient,
} from '../../testkit/e2e.js';
import { DEVOP_BIN, ESCAPE_CODES, runCli } from './helpers/cli.js';
import { waitFor } from '../../testkit/wait.js';
import { freePort } from '../../testkit/sockets.js';

requireRoot('ui exec output');

interface Task {
  label: string;
  command: string;
  args: string[];
  options: { cwd: string };
  problemMatcher: { background: { beginsPattern: string; endsPattern: string } };
}

describe('devop exec output when piped', () => {
  let cluster: Cluster | undefined;
  let echo: EchoDeployment;
  // Requests come from another pod: the host is the node, whose connections (kubelet probes) are never stolen.
  let client: PodClient;
  const runs: DevopRun[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'devop-ui-exec-'));

  beforeAll(async () => {
    const env = await startE2ECluster();
    cluster = env.cluster;
    echo = await deployEcho(env, 'uiout');
    client = await startPodClient(env);
  });

  afterAll(async () => {
    client?.close();
    await Promise.all(runs.map((run) => run.stop('SIGKILL')));
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const exec = (args: string[], local: number, env: NodeJS.ProcessEnv = {}) => {
    const run = new DevopRun(
      [
        'exec',
        '--kubeconfig',
        cluster!.kubeconfigPath,
        ...args,
        '-t',
        'deploy/uiout',
        '--steal',
        '-p',
        `8080:${local}`,
        '--',
        process.execPath,
        LOCAL_SERVER,
      ],
      {
        env: { LOCAL_PORT: String(local), ...env },
      },
    );
    runs.push(run);
    return run;
  };

  it('auto output on pipes is Plain: no escape codes, ready line, no crash', async () => {
    // Given devop run with pipes (CI unset: the choice comes from the pipes alone)
    const local = await freePort();
    const run = exec([], local, { CI: '' });
    // When it is ready and serves a request
    try {
      await run.ready();
      expect(await client.who(echo.podIP, 8080, '/piped'), run.output).toBe('local');
    } finally {
      await run.stop('SIGTERM');
    }
    const exit = await run.exited;
    // Then it exits with the local command's code, printed lines only, and no escape code on either stream
    expect(exit.code, run.output).toBe(0);
    expect(run.stderr).not.toMatch(ESCAPE_CODES);
    expect(run.stdout).not.toMatch(ESCAPE_CODES);
    const lines = run.stderr.split('\n');
    expect(lines[0]).toMatch(/^devop: → resolve target\b/);
    expect(lines).toContain('devop: ready');
    expect(lines.some((line) => /^devop: ✓ stealing :8080\b/.test(line))).toBe(true);
    // And the local command's own output went to stdout untouched
    expect(run.stdout).toContain('"seen":"request"');
  });

  it('--output json: every stdout line is a JSON event with a type, including ready, traffic and exit', async () => {
    // Given devop with --output json
    const local = await freePort();
    const run = exec(['--output', 'json'], local);
    try {
      await run.waitForStdout(/"type":"ready"/);
      // When a request is stolen and devop stops
      expect(await client.who(echo.podIP, 8080, '/json'), run.output).toBe('local');
      await waitFor('a traffic event', () => (/"type":"(connection|request)"/.test(run.stdout) ? true : undefined));
    } finally {
      await run.stop('SIGTERM');
    }
    const exit = await run.exited;
    expect(exit.code, run.output).toBe(0);
    // Then each line parses, has a type, and the sequence has steps, ready, traffic, the child's output and exit
    const events = run.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { type: string; [key: string]: unknown });
    const types = new Set(events.map((event) => event.type));
    for (const event of events) expect(typeof event.type).toBe('string');
    expect([...types]).toEqual(expect.arrayContaining(['step', 'ready', 'output', 'exit']));
    expect(types.has('connection') || types.has('request')).toBe(true);
    // And the stolen connection went through the agent container's native data path (devop-splice's ids: <port>-n<n>,
    // after the pod's name)
    expect(events.find((event) => event.type === 'connection')).toMatchObject({
      id: expect.stringMatching(/^[a-z0-9-]+\/8080-n\d+$/),
    });
    expect(events.find((event) => event.type === 'ready')).toMatchObject({
      session: {
        target: 'deploy/uiout',
        pod: echo.podName,
        ports: [{ remotePort: 8080, localPort: local, mode: 'steal' }],
      },
    });
    // And the local command's output arrived as output events (stdout carries only events)
    expect(events.some((event) => event.type === 'output' && String(event.text).includes('"seen":"request"'))).toBe(
      true,
    );
  });

  it('the task written by `devop vscode init`, run as VS Code runs it, prints lines its begins/ends patterns match', async () => {
    // Given a workspace set up with vscode init for this target (devop started the way this checkout runs it)
    const local = await freePort();
    const inspect = await freePort();
    const init = await runCli([
      'vscode',
      'init',
      '--dir',
      dir,
      '--devop-command',
      `${process.execPath} ${DEVOP_BIN}`,
      '--inspect-port',
      String(inspect),
      '--kubeconfig',
      cluster!.kubeconfigPath,
      '-t',
      'deploy/uiout',
      '--steal',
      '-p',
      `8080:${local}`,
      '--',
      process.execPath,
      LOCAL_SERVER,
    ]);
    expect(init.code, init.stderr).toBe(0);
    const task = (JSON.parse(readFileSync(join(dir, '.vscode', 'tasks.json'), 'utf8')) as { tasks: Task[] }).tasks.find(
      (t) => t.label === 'devop: exec',
    )!;
    // When the task's command runs (VS Code reads the task terminal: stdout and stderr)
    const child = spawn(task.command, task.args, {
      cwd: task.options.cwd.replace('${workspaceFolder}', dir),
      env: { ...process.env, LOCAL_PORT: String(local) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let terminal = '';
    child.stdout.setEncoding('utf8').on('data', (text: string) => (terminal += text));
    child.stderr.setEncoding('utf8').on('data', (text: string) => (terminal += text));
    const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
    const begins = new RegExp(task.problemMatcher.background.beginsPattern, 'm');
    const ends = new RegExp(task.problemMatcher.background.endsPattern, 'm');
    try {
      // Then the begins pattern matches the first line devop prints, and the ends pattern the ready line
      await waitFor(
        () => `the ends pattern in the task output\n${terminal}`,
        () => (ends.test(terminal) ? true : undefined),
      );
      const lines = terminal.split('\n');
      expect(lines.find((line) => line.startsWith('devop: '))).toMatch(begins);
      expect(lines.filter((line) => ends.test(line))).toEqual(['devop: ready']);
      expect(terminal.indexOf('devop: ready')).toBeGreaterThan(terminal.search(begins));
      // And the session works: the debugger port is open (node --inspect) and the pod's traffic reaches the local
      // command
      expect(await client.who(echo.podIP, 8080, '/from-vscode')).toBe('local');
      expect(terminal).toContain(`ws://127.0.0.1:${inspect}/`);
    } finally {
      child.kill('SIGTERM');
      expect(await exited, terminal).toBe(0);
    }
  });
});
