// Pause and resume in a real terminal with a keep-alive client (as the API server's aggregator is one): a connection
// opened while paused is answered by the pod; after `p` resumes the steal, the same client's next request reaches the
// local command (the agent ended the pod-bound connection, and the client's reconnect is stolen). The same for `m` from
// mirror to steal.
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

requireRoot('ui terminal: pause with keep-alive');

describe('devop exec in a terminal: p with a keep-alive client', () => {
  let cluster: Cluster | undefined;
  let echo: EchoDeployment;
  let client: PodClient;
  let pane: TmuxPane | undefined;

  beforeAll(async () => {
    const env = await startE2ECluster();
    cluster = env.cluster;
    echo = await deployEcho(env, 'tui-pause');
    client = await startPodClient(env);
  });

  afterAll(async () => {
    client?.close();
    pane?.kill();
    await cluster?.stop();
  });

  const screen = (what: string, test: (text: string) => boolean) => pane!.waitForScreen(what, test);

  it('a keep-alive connection opened during the pause moves to the local command on resume', async () => {
    // Given devop stealing the whole port of the echo pod
    const local = await freePort();
    const devop = [
      process.execPath,
      DEVOP_BIN,
      'exec',
      '--kubeconfig',
      cluster!.kubeconfigPath,
      '-t',
      'deploy/tui-pause',
      '--steal',
      '-p',
      `8080:${local}`,
      '--',
      process.execPath,
      LOCAL_SERVER,
    ];
    pane = new TmuxPane(`env -u CI LOCAL_PORT=${local} ${devop.map(shellQuote).join(' ')}; echo DEVOP_EXITED=$?`, {
      width: 140,
      height: 45,
    });
    try {
      await screen('the live view', (text) => text.includes('q quit') && /:8080 stealing → local :\d+/.test(text));
      // When p pauses, and a keep-alive client connects during the pause
      pane.sendKeys('p');
      await screen('the paused header', (text) => /:8080 paused/.test(text));
      // A fresh connection answered by the pod shows the agent has the pause; only then does the kept-alive client
      // connect (one that connected before would stay stolen: a pause affects new connections).
      await waitFor(
        'the pause to take effect',
        async () => ((await client.who(echo.podIP, 8080, '/paused-probe')) === echo.podName ? true : undefined),
        SCREEN_WAIT_MS,
      );
      const during = await waitFor(
        'the pod to answer the keep-alive client while paused',
        async () => {
          const answer = await client.keepAliveGet(echo.podIP, 8080, '/during-pause');
          return answer.body.includes(echo.podName) ? answer : undefined;
        },
        SCREEN_WAIT_MS,
      );
      expect(during.body).toContain(echo.podName);
      const again = await client.keepAliveGet(echo.podIP, 8080, '/during-pause-2');
      expect([again.body.includes(echo.podName), again.reused]).toEqual([true, true]);
      // When p resumes
      pane.sendKeys('p');
      await screen('the stealing header', (text) => /:8080 stealing/.test(text));
      // Then the same client's next request reaches the local command (on a new connection)
      const after = await waitFor(
        'the keep-alive client to reach the local command after resume',
        async () => {
          const answer = await client.keepAliveGet(echo.podIP, 8080, '/after-resume');
          return answer.body.startsWith('local ') ? answer : undefined;
        },
        SCREEN_WAIT_MS,
      );
      expect(after.reused).toBe(false);
      pane.sendKeys('q');
      await screen('devop to exit', (text) => text.includes('DEVOP_EXITED='));
      expect(pane.capture()).toContain('DEVOP_EXITED=0');
    } catch (err) {
      (err as Error).message += `\n--- screen ---\n${pane.capture()}`;
      throw err;
    }
  });

  it('a keep-alive connection to the pod while mirroring moves to the local command when m switches to steal', async () => {
    // Given devop mirroring the echo pod's port, and a keep-alive client talking to the pod
    pane?.kill();
    const local = await freePort();
    const devop = [
      process.execPath,
      DEVOP_BIN,
      'exec',
      '--kubeconfig',
      cluster!.kubeconfigPath,
      '-t',
      'deploy/tui-pause',
      '--mirror',
      '-p',
      `8080:${local}`,
      '--',
      process.execPath,
      LOCAL_SERVER,
    ];
    pane = new TmuxPane(`env -u CI LOCAL_PORT=${local} ${devop.map(shellQuote).join(' ')}; echo DEVOP_EXITED=$?`, {
      width: 140,
      height: 45,
    });
    try {
      await screen('the live view', (text) => text.includes('q quit') && /:8080 mirroring → local :\d+/.test(text));
      const first = await client.keepAliveGet(echo.podIP, 8080, '/mirrored-1');
      const second = await client.keepAliveGet(echo.podIP, 8080, '/mirrored-2');
      expect([first.body.includes(echo.podName), second.body.includes(echo.podName), second.reused]).toEqual([
        true,
        true,
        true,
      ]);
      // When m switches to steal
      pane.sendKeys('m');
      await screen('the stealing header', (text) => /:8080 stealing/.test(text));
      // Then the same client's next request reaches the local command (on a new connection)
      const after = await waitFor(
        'the keep-alive client to reach the local command after the switch',
        async () => {
          const answer = await client.keepAliveGet(echo.podIP, 8080, '/after-switch');
          return answer.body.startsWith('local ') ? answer : undefined;
        },
        SCREEN_WAIT_MS,
      );
      expect(after.reused).toBe(false);
      pane.sendKeys('q');
      await screen('devop to exit', (text) => text.includes('DEVOP_EXITED='));
    } catch (err) {
      (err as Error).message += `\n--- screen ---\n${pane.capture()}`;
      throw err;
    }
  });

  it('m while paused switches the mode and stays paused: the pod still answers until p', async () => {
    // Given devop mirroring, paused
    pane?.kill();
    const local = await freePort();
    const devop = [
      process.execPath,
      DEVOP_BIN,
      'exec',
      '--kubeconfig',
      cluster!.kubeconfigPath,
      '-t',
      'deploy/tui-pause',
      '--mirror',
      '-p',
      `8080:${local}`,
      '--',
      process.execPath,
      LOCAL_SERVER,
    ];
    pane = new TmuxPane(`env -u CI LOCAL_PORT=${local} ${devop.map(shellQuote).join(' ')}; echo DEVOP_EXITED=$?`, {
      width: 140,
      height: 45,
    });
    try {
      await screen('the live view', (text) => text.includes('q quit') && /:8080 mirroring → local :\d+/.test(text));
      pane.sendKeys('p');
      await screen('the paused header', (text) => /:8080 paused/.test(text));
      // When m switches to steal while paused
      pane.sendKeys('m');
      await screen('the paused header in steal mode', (text) => /:8080 paused \(steal/.test(text));
      // Then the pod still answers (a few fresh connections, each routed anew)
      for (const path of ['/paused-steal-1', '/paused-steal-2', '/paused-steal-3'])
        expect(await client.who(echo.podIP, 8080, path)).toBe(echo.podName);
      // And p resumes the steal
      pane.sendKeys('p');
      await screen('the stealing header', (text) => /:8080 stealing/.test(text));
      await waitFor(
        'the local command to answer after resume',
        async () => ((await client.who(echo.podIP, 8080, '/resumed-steal')) === 'local' ? true : undefined),
        SCREEN_WAIT_MS,
      );
      pane.sendKeys('q');
      await screen('devop to exit', (text) => text.includes('DEVOP_EXITED='));
    } catch (err) {
      (err as Error).message += `\n--- screen ---\n${pane.capture()}`;
      throw err;
    }
  });
});
