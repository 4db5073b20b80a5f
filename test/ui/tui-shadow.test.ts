// --shadow in a real terminal: tmux runs `devop exec --shadow` against the stand-in with a local command that writes
// through the kubeconfig devop gives it; each write is a row with its changes, `d` opens the newest write's whole diff,
// and the cluster keeps what it had.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CoreV1Api } from '@kubernetes/client-node';
import { requireRoot } from '../../testkit/root.js';
import { startE2ECluster, type Cluster } from '../../testkit/e2e.js';
import { DEVOP_BIN, REPO_ROOT } from './helpers/cli.js';
import { TmuxPane, shellQuote } from './helpers/tmux.js';

requireRoot('ui terminal: --shadow');

const WRITER = `${REPO_ROOT}test/ui/fixtures/shadow-writer.mjs`;

describe('devop exec --shadow in a terminal (tmux)', () => {
  let cluster: Cluster | undefined;
  let core: CoreV1Api;
  let pane: TmuxPane | undefined;

  beforeAll(async () => {
    const env = await startE2ECluster();
    cluster = env.cluster;
    core = env.core;
  });

  afterAll(async () => {
    pane?.kill();
    await cluster?.stop();
  });

  it('lists the local command writes as dry runs, d shows the diff, and the cluster keeps what it had', async () => {
    // Given a ConfigMap in the cluster and devop --shadow running a command that creates one and patches that one
    await core.createNamespacedConfigMap({
      namespace: 'default',
      body: { metadata: { name: 'tui-shadow-kept' }, data: { a: '1' } },
    });
    const devop = [
      process.execPath,
      DEVOP_BIN,
      'exec',
      '--kubeconfig',
      cluster!.kubeconfigPath,
      '--shadow',
      '-t',
      'targetless',
      '--',
      process.execPath,
      WRITER,
    ];
    const command = `cd ${shellQuote(REPO_ROOT)} && env -u CI ${devop.map(shellQuote).join(' ')}; echo DEVOP_EXITED=$?`;
    pane = new TmuxPane(command, { width: 140, height: 45 });
    const screen = (what: string, test: (text: string) => boolean) => pane!.waitForScreen(what, test);
    try {
      // Then each write is a row: verb, kind, namespace/name, status, dry-run; the patch's changes below it
      const rows = await screen('both writes', (text) => text.includes('shadow-writer: wrote') && /PATCH/.test(text));
      expect(rows).toMatch(/write CREATE\s+ConfigMap default\/tui-shadow-made\s+201 dry-run/);
      expect(rows).toMatch(/write PATCH\s+ConfigMap default\/tui-shadow-kept\s+200 dry-run/);
      expect(rows).toContain('± data.a: "1" → "2"; data.b: ∅ → "2"; data.c: ∅ → "2"; … 1 more (d)');
      // When d is pressed
      pane.sendKeys('d', true);
      // Then the panel shows every change of the patch
      const diff = await screen('the diff panel', (text) => text.includes('data.d: ∅ → "2"'));
      expect(diff).toContain('patch ConfigMap default/tui-shadow-kept → dry-run 200');
      // When q is pressed, devop ends with the command
      pane.sendKeys('q', true);
      await screen('devop to exit', (text) => /DEVOP_EXITED=0/.test(text));
    } catch (err) {
      (err as Error).message += `\n--- screen ---\n${pane.capture()}`;
      throw err;
    }
    // And the cluster has no new ConfigMap and the old one as it was
    const names = (await core.listNamespacedConfigMap({ namespace: 'default' })).items.map((c) => c.metadata?.name);
    expect(names).not.toContain('tui-shadow-made');
    expect((await core.readNamespacedConfigMap({ name: 'tui-shadow-kept', namespace: 'default' })).data).toEqual({
      a: '1',
    });
  }, 240_000);
});
