// The TUI in a real terminal: tmux runs `devop exec` against the stand-in; requests show up in the list; `p` sends the
// traffic back to the pod and again to the local command; `m` switches to mirror; `q` stops devop and the local
// command.
import { writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import {
  LOCAL_SERVER,
  deployEcho,
  startE2ECluster,
  startPodClient,
  type Cluster,
  type EchoDeployment,
  type PodClient,
} from '../../testkit/e2e.js';
import { DEVOP_BIN } from './helpers/cli.js';
import { SCREEN_WAIT_MS, TmuxPane, shellQuote } from './helpers/tmux.js';
import { waitFor } from '../../testkit/wait.js';
import { freePort } from '../../testkit/sockets.js';

requireRoot('ui terminal');

function portAccepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

describe('devop exec in a terminal (tmux)', () => {
  let cluster: Cluster | undefined;
  let echo: EchoDeployment;
  // Requests come from another pod: the host is the node, whose connections (kubelet probes) are never stolen.
  let client: PodClient;
  let pane: TmuxPane | undefined;

  beforeAll(async () => {
    const env = await startE2ECluster();
    cluster = env.cluster;
    echo = await deployEcho(env, 'tui');
    client = await startPodClient(env);
  });

  afterAll(async () => {
    client?.close();
    pane?.kill();
    await cluster?.stop();
  });

  const screen = (what: string, test: (text: string) => boolean) => pane!.waitForScreen(what, test);

  it('lists requests, pauses and resumes with p, mirrors with m, and quits cleanly with q', async () => {
    // Given devop stealing the echo pod's port for requests with x-user: tui, in a 140×45 terminal
    const local = await freePort();
    const devop = [
      process.execPath,
      DEVOP_BIN,
      'exec',
      '--kubeconfig',
      cluster!.kubeconfigPath,
      '-t',
      'deploy/tui',
      '--steal',
      '-p',
      `8080:${local}`,
      '--http-header-filter',
      'x-user: tui',
      '--',
      process.execPath,
      LOCAL_SERVER,
    ];
    // CI unset: interactive means stdin and stdout are terminals and CI is not set.
    const command = `env -u CI LOCAL_PORT=${local} ${devop.map(shellQuote).join(' ')}; echo DEVOP_EXITED=$?`;
    pane = new TmuxPane(command, { width: 140, height: 45 });
    try {
      await steerAndQuit(local);
    } catch (err) {
      // Whatever failed, the screen says most about why.
      (err as Error).message += `\n--- screen ---\n${pane.capture()}`;
      throw err;
    }
  });

  async function steerAndQuit(local: number): Promise<void> {
    const terminal = pane!;
    await screen('the live view', (text) => text.includes('q quit') && /:8080 stealing → local :\d+/.test(text));

    // When requests are sent to the pod: two for the local command, one for the pod
    expect(await client.who(echo.podIP, 8080, '/tui-first', { 'x-user': 'tui' })).toBe('local');
    expect(await client.who(echo.podIP, 8080, '/tui-second', { 'x-user': 'tui' })).toBe('local');
    expect(await client.who(echo.podIP, 8080, '/tui-other')).toBe(echo.podName);
    // Then the list shows them with method, path, status and where they went
    const listed = await screen('the three requests answered', (text) =>
      [
        /GET\s+\/tui-first\s+200\b.*→ local/,
        /GET\s+\/tui-second\s+200\b.*→ local/,
        /GET\s+\/tui-other\s+200\b.*→ pod/,
      ].every((row) => row.test(text)),
    );
    expect(listed).toMatch(/requests 3\b/);

    // When p is pressed
    terminal.sendKeys('p');
    await screen('the paused header', (text) => /:8080 paused/.test(text));
    // Then matching requests reach the pod again
    await waitFor(
      'the pod to answer while paused',
      async () =>
        (await client.who(echo.podIP, 8080, '/tui-paused', { 'x-user': 'tui' })) === echo.podName ? true : undefined,
      SCREEN_WAIT_MS,
    );
    // And the list shows the paused request, answered by the pod
    await screen('the paused request listed', (text) => /GET\s+\/tui-paused\s+200\b.*→ pod/.test(text));
    // When p is pressed again, the local command answers again
    terminal.sendKeys('p');
    await screen('the stealing header', (text) => /:8080 stealing/.test(text));
    await waitFor(
      'the local command to answer after resume',
      async () =>
        (await client.who(echo.podIP, 8080, '/tui-resumed', { 'x-user': 'tui' })) === 'local' ? true : undefined,
      SCREEN_WAIT_MS,
    );

    // When m is pressed: mirror — the pod answers, the local command gets a copy
    terminal.sendKeys('m');
    await screen('the mirroring header', (text) => /:8080 mirroring/.test(text));
    await waitFor(
      'the pod to answer in mirror mode',
      async () =>
        (await client.who(echo.podIP, 8080, '/tui-mirrored', { 'x-user': 'tui' })) === echo.podName ? true : undefined,
      SCREEN_WAIT_MS,
    );
    const mirrored = await screen('the mirrored copy in the output pane', (text) => text.includes('/tui-mirrored'));
    if (process.env.DEVOP_TUI_CAPTURE)
      writeFileSync(process.env.DEVOP_TUI_CAPTURE, `${mirrored}\n=====\n${terminal.captureAll()}`);

    // When q is pressed
    terminal.sendKeys('q');
    // Then devop exits 0, the local command is stopped, and the pod serves its own traffic
    await screen('devop to exit', (text) => text.includes('DEVOP_EXITED='));
    expect(terminal.capture()).toContain('DEVOP_EXITED=0');
    // And nothing but the UI reached the terminal (a stray warning would tear the frame)
    expect(terminal.captureAll()).not.toMatch(/Warning|Encountered|Error:/);
    expect(await portAccepts(local)).toBe(false);
    expect(await client.who(echo.podIP, 8080, '/after', { 'x-user': 'tui' })).toBe(echo.podName);
  }
});
