// `devop exec` on a shared cluster, end to end: a hostNetwork pod is refused (--allow-host-network takes it, with a
// warning), the pod's code-loading env vars do not reach the local command (--env-allow keeps one), and a session
// directory left by a kill -9 of devop is removed by the next run while a live session's is kept.
import type { V1PodSpec } from '@kubernetes/client-node';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import type { TargetCluster } from '../../testkit/target-cluster.js';
import { type DevopRun, devopExec, startE2ETarget, type E2ETarget } from '../../testkit/e2e.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('e2e shared-cluster safety');

/** The last line devop printed: the problem and the fix. */
function lastLine(run: DevopRun): string {
  return run.stderr.trim().split('\n').slice(-1)[0] ?? '';
}

describe('devop exec on a shared cluster', () => {
  let env: E2ETarget;
  let cluster: TargetCluster;
  const runs: DevopRun[] = [];
  const track = (run: DevopRun): DevopRun => {
    runs.push(run);
    return run;
  };
  const local = mkdtempSync(join(tmpdir(), 'devop-safety-'));
  /** The file the pod's NODE_OPTIONS names: a local Node command that loads it writes `ran`. */
  const hook = join(local, 'x.js');
  const ran = join(local, 'ran');

  async function deploy(name: string, podSpec: V1PodSpec): Promise<void> {
    await env.apps.createNamespacedDeployment({
      namespace: env.namespace,
      body: {
        metadata: { name },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: name } },
          template: { metadata: { labels: { app: name } }, spec: podSpec },
        },
      },
    });
  }

  beforeAll(async () => {
    env = await startE2ETarget('e2e-safety');
    cluster = env.cluster;
    writeFileSync(hook, `require('fs').writeFileSync(${JSON.stringify(ran)}, 'pod code ran here\\n');\n`);
    const sleeper = { name: 'main', image: 'devop.test/shell', command: ['sh', '-c', 'exec sleep 100000'] };
    // An exporter-like DaemonSet pod on its node's network (the stand-in's kubelet still gives it a netns of its own:
    // what matters here is the spec devop reads through the API before it starts anything)
    await deploy('hostnet', { hostNetwork: true, containers: [sleeper] });
    // A pod whose env would make a local node load a file of this machine, and preload a library into anything
    await deploy('hooked', {
      containers: [
        {
          ...sleeper,
          env: [
            { name: 'NODE_OPTIONS', value: `--require=${hook}` },
            { name: 'LD_PRELOAD', value: join(local, 'evil.so') },
            { name: 'PYTHONPATH', value: local },
            { name: 'APP_MODE', value: 'production' },
          ],
        },
      ],
    });
    await waitFor('Ready pods of hostnet and hooked', async () => {
      const pods = (await env.core.listNamespacedPod({ namespace: env.namespace })).items;
      const ready = (app: string): boolean =>
        pods.some(
          (p) =>
            p.metadata?.labels?.app === app &&
            p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
        );
      return ready('hostnet') && ready('hooked');
    });
  });

  afterAll(async () => {
    await Promise.all(runs.map((r) => r.dispose()));
    rmSync(local, { recursive: true, force: true });
    await cluster?.stop();
  });

  it('refuses a hostNetwork pod in one line naming --allow-host-network, and takes it with a warning', async () => {
    // Given a deployment whose pods use the node's network
    // When devop exec targets it without the flag
    const refused = track(devopExec(cluster, ['-t', 'deploy/hostnet'], ['true']));
    // Then it fails with one line naming the problem and the flag
    expect((await refused.exited).code, refused.output).toBe(1);
    expect(lastLine(refused)).toMatch(/^devop: pod hostnet-\S+ uses its node's network \(hostNetwork: true\): /);
    expect(lastLine(refused)).toMatch(/stealing, mirroring or flushing .* --allow-host-network/);
    // When the flag is given, the session starts with a warning that says what happens node-wide
    const allowed = track(devopExec(cluster, ['-t', 'deploy/hostnet', '--allow-host-network'], ['true']));
    expect((await allowed.exited).code, allowed.output).toBe(0);
    expect(allowed.stderr).toMatch(/uses its node's network \(--allow-host-network\): steal, mirror and flush act on/);
  });

  it('refuses to replace a hostNetwork workload before anything is scaled', async () => {
    // Given the same deployment on the host network
    // When devop exec --replace targets it
    const run = track(devopExec(cluster, ['-t', 'deploy/hostnet', '--replace'], ['true']));
    // Then it is refused in one line, and the workload keeps its replica and gets no copy
    expect((await run.exited).code, run.output).toBe(1);
    expect(lastLine(run)).toMatch(
      /^devop: deployment\/hostnet runs its pods on their node's network \(hostNetwork: true\), .*--allow-host-network/,
    );
    const deployment = await env.apps.readNamespacedDeployment({ name: 'hostnet', namespace: env.namespace });
    expect(deployment.spec?.replicas).toBe(1);
    const pods = (await env.core.listNamespacedPod({ namespace: env.namespace })).items;
    expect(pods.filter((p) => p.metadata?.name?.includes('devop-replace')).map((p) => p.metadata?.name)).toEqual([]);
  });

  it("keeps the pod's NODE_OPTIONS, LD_PRELOAD, PYTHONPATH from the local command unless named", async () => {
    const print = [
      process.execPath,
      '-e',
      'for (const k of ["NODE_OPTIONS", "LD_PRELOAD", "PYTHONPATH", "APP_MODE"]) console.log(`${k}=${process.env[k]}`)',
    ];
    // Given a pod whose NODE_OPTIONS requires a file of this machine
    // When a local node runs as that pod
    const run = track(devopExec(cluster, ['-t', 'deploy/hooked'], print));
    expect((await run.exited).code, run.output).toBe(0);
    // Then the file never ran, the code-loading vars are not the pod's, devop's own preload is there, the rest is
    expect(existsSync(ran), run.output).toBe(false);
    const nodeOptions = /^NODE_OPTIONS=(.*)$/m.exec(run.stdout)?.[1] ?? '';
    expect(nodeOptions, run.output).not.toContain(hook);
    expect(nodeOptions, run.output).toMatch(/--import[= ]\S*preload/);
    // LD_PRELOAD holds devop's own outgoing shim (dist/devop-outgoing.so, where it is built), never the pod's
    const ldPreload = /^LD_PRELOAD=(.*)$/m.exec(run.stdout)?.[1] ?? '';
    expect(ldPreload, run.output).not.toContain('evil.so');
    expect(ldPreload, run.output).toMatch(/^(undefined|\S*\/dist\/devop-outgoing\.so)$/);
    expect(run.stdout).toContain('PYTHONPATH=undefined');
    expect(run.stdout).toContain('APP_MODE=production');
    // And one line says which were left out and how to keep one
    expect(run.stderr).toMatch(
      /left out the pod's LD_PRELOAD, NODE_OPTIONS, PYTHONPATH \(they make programs load code.*--env-allow LD_PRELOAD/,
    );
    // When the user names NODE_OPTIONS, it reaches the command beside devop's preload
    const allowed = track(devopExec(cluster, ['-t', 'deploy/hooked', '--env-allow', 'NODE_OPTIONS'], print));
    expect((await allowed.exited).code, allowed.output).toBe(0);
    expect(existsSync(ran), allowed.output).toBe(true);
  });

  it("removes a kill -9'd devop's session directory on the next run, and keeps a live session's", async () => {
    // Given two --shadow sessions (each writes its kubeconfig under the temp dir), one then killed with SIGKILL
    const temp = mkdtempSync(join(local, 'tmp-'));
    const shadowDirs = (): string[] => readdirSync(temp).filter((n) => n.startsWith('devop-shadow-'));
    const session = (): DevopRun =>
      track(devopExec(cluster, ['-t', 'deploy/hooked', '--shadow'], ['sleep', '300'], { env: { TMPDIR: temp } }));
    const live = session();
    await live.ready();
    const killed = session();
    await killed.ready();
    const killedDir = `devop-shadow-${killed.child.pid}-`;
    const liveDir = `devop-shadow-${live.child.pid}-`;
    expect(shadowDirs().some((n) => n.startsWith(killedDir))).toBe(true);
    killed.child.kill('SIGKILL');
    await killed.exited;
    // Then its directory is left behind
    expect(shadowDirs().some((n) => n.startsWith(killedDir))).toBe(true);
    // When devop runs again
    const next = track(devopExec(cluster, ['-t', 'deploy/hooked'], ['true'], { env: { TMPDIR: temp } }));
    expect((await next.exited).code, next.output).toBe(0);
    // Then the dead session's directory is gone (and said so), the live one's is still there
    expect(
      shadowDirs().some((n) => n.startsWith(killedDir)),
      next.output,
    ).toBe(false);
    expect(next.stderr).toContain(`left by devop ${killed.child.pid} (gone)`);
    expect(shadowDirs().some((n) => n.startsWith(liveDir))).toBe(true);
  });
});
