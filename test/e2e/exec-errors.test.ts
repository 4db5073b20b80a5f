// `devop exec` and `devop ls` end to end: exit codes and signals pass through, and every user-facing failure is one
// line naming the problem and its fix (`devop: … — fix: …`) — no kubeconfig/context, missing namespace/target, no Ready
// pod, RBAC denial, agent protocol mismatch, local command not found.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { AGENT_BUNDLE_PATH, AGENT_IMAGE } from '../../shared/agent-contract.js';
import { buildImage } from '../../standin/kubelet/image-build.js';
import { removeImage } from '../../testkit/pods.js';
import { requireRoot } from '../../testkit/root.js';
import { standinOnly, type TargetCluster } from '../../testkit/target-cluster.js';
import { DevopRun, ROOT, deployEcho, devopExec, startE2ETarget, type E2ETarget } from '../../testkit/e2e.js';
import { freePort } from '../../testkit/sockets.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('e2e exec errors');

/** The last line devop printed: the problem and the fix. */
function failure(run: DevopRun): string {
  return run.stderr.trim().split('\n').slice(-1).join('\n');
}

describe('devop exec: exit codes and errors', () => {
  let cluster: TargetCluster;
  let env: E2ETarget;
  const runs: DevopRun[] = [];
  const track = (run: DevopRun): DevopRun => {
    runs.push(run);
    return run;
  };
  /** Local directories the runs use: removed in afterAll, once every run has ended. */
  const dirs: string[] = [];
  const tempDir = (prefix: string): string => {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    dirs.push(dir);
    return dir;
  };

  beforeAll(async () => {
    env = await startE2ETarget('e2e-errors');
    cluster = env.cluster;
    await deployEcho(env, 'echo');
  });

  afterAll(async () => {
    await Promise.all(runs.map((r) => r.dispose()));
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
    await cluster?.stop();
  });

  it("exits with the local command's exit code", async () => {
    const run = track(devopExec(cluster, ['-t', 'deploy/echo'], ['sh', '-c', 'exit 7']));
    expect((await run.exited).code, run.output).toBe(7);
  });

  it('exits with 128 + signal when the local command is killed by a signal, and forwards signals to it', async () => {
    const selfKill = track(devopExec(cluster, ['-t', 'deploy/echo'], ['sh', '-c', 'kill -TERM $$']));
    expect((await selfKill.exited).code, selfKill.output).toBe(143);
    // Given a local command that reports SIGINT and exits 42
    const run = track(
      devopExec(
        cluster,
        ['-t', 'deploy/echo'],
        ['sh', '-c', 'trap "echo got-int; exit 42" INT; echo started; while true; do sleep 0.1; done'],
      ),
    );
    await waitFor('the local command to start', () => (run.stdout.includes('started') ? true : undefined));
    // When devop gets SIGINT (not from a terminal)
    run.child.kill('SIGINT');
    // Then the command got it and devop exits with its code
    expect((await run.exited).code, run.output).toBe(42);
    expect(run.stdout).toContain('got-int');
  });

  it('says when there is no kubeconfig', async () => {
    const run = track(
      new DevopRun(['exec', '-t', 'deploy/echo', '--output', 'plain', '--', 'true'], {
        env: { KUBECONFIG: '/nonexistent/devop-kubeconfig' },
      }),
    );
    expect((await run.exited).code).toBe(1);
    expect(failure(run)).toBe(
      'devop: no kubeconfig found (KUBECONFIG: /nonexistent/devop-kubeconfig) — fix: point --kubeconfig or ' +
        'KUBECONFIG at a kubeconfig file, or create ~/.kube/config (e.g. with your cloud CLI)',
    );
  });

  it('says when the kubeconfig has no current context, or the asked context is unknown', async () => {
    const doc = parse(readFileSync(cluster.kubeconfigPath, 'utf8')) as Record<string, unknown> & {
      contexts: { name: string }[];
    };
    delete doc['current-context'];
    const path = join(tempDir('devop-e2e-'), 'config');
    writeFileSync(path, stringify(doc));
    const run = track(devopExec(cluster, ['-t', 'deploy/echo'], ['true'], { kubeconfig: path }));
    expect((await run.exited).code).toBe(1);
    expect(failure(run)).toMatch(
      new RegExp(
        /^devop: the kubeconfig \(.*\) has no current context — fix: pass --context \(one of: .+\) or run /.source +
          /`kubectl config use-context NAME`$/.source,
      ),
    );
    const unknown = track(devopExec(cluster, ['-t', 'deploy/echo', '--context', 'nope'], ['true']));
    expect((await unknown.exited).code).toBe(1);
    expect(failure(unknown)).toMatch(
      new RegExp(
        /^devop: context "nope" is not in the kubeconfig \(contexts: .+\) — fix: pass one of the listed /.source +
          /contexts to --context$/.source,
      ),
    );
  });

  it('says when the namespace does not exist', async () => {
    const run = track(devopExec(cluster, ['-t', 'deploy/echo', '-n', 'no-such-ns'], ['true']));
    expect((await run.exited).code).toBe(1);
    expect(failure(run)).toMatch(/^devop: namespace "no-such-ns" not found — fix: pass an existing namespace with -n/);
  });

  it('lists what exists when the target is not found', async () => {
    const run = track(devopExec(cluster, ['-t', 'deploy/nope'], ['true']));
    expect((await run.exited).code).toBe(1);
    expect(failure(run)).toBe(
      `devop: deployment "nope" not found in namespace "${env.namespace}" (deployments there: echo) — ` +
        'fix: check the name and -n/--namespace; `devop ls` lists the targets',
    );
    const pod = track(devopExec(cluster, ['-t', 'pod/nope'], ['true']));
    expect((await pod.exited).code).toBe(1);
    const podNotFound = `devop: pod "nope" not found in namespace "${env.namespace}" (pods there: echo-`;
    expect(failure(pod).startsWith(podNotFound), failure(pod)).toBe(true);
    const bad = track(devopExec(cluster, ['-t', 'nonsense'], ['true']));
    expect((await bad.exited).code).toBe(1);
    expect(failure(bad)).toMatch(/^devop: invalid target "nonsense"/);
  });

  it('says when no pod is Ready, with the pods states', async () => {
    // Given a deployment whose pod never passes its readiness probe
    await env.apps.createNamespacedDeployment({
      namespace: env.namespace,
      body: {
        metadata: { name: 'never-ready' },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: 'never-ready' } },
          template: {
            metadata: { labels: { app: 'never-ready' } },
            spec: {
              containers: [
                {
                  name: 'echo',
                  image: 'devop.test/http-echo',
                  env: [{ name: 'PORT', value: '8080' }],
                  readinessProbe: { tcpSocket: { port: 9999 }, periodSeconds: 1 },
                },
              ],
            },
          },
        },
      },
    });
    await waitFor('the never-ready pod to run', async () => {
      const list = await env.core.listNamespacedPod({ namespace: env.namespace, labelSelector: 'app=never-ready' });
      return list.items.some((p) => p.status?.phase === 'Running') ? true : undefined;
    });
    const run = track(devopExec(cluster, ['-t', 'deploy/never-ready'], ['true']));
    expect((await run.exited).code).toBe(1);
    expect(failure(run)).toMatch(
      new RegExp(
        /^devop: deployment\/never-ready has no Ready pod \(never-ready-\S+: Running, not Ready\) — fix: /.source +
          /wait until a pod is Ready/.source,
      ),
    );
  });

  const onStandinRbac = standinOnly("the restricted user is the stand-in's");
  onStandinRbac('names the missing RBAC permissions (SelfSubjectAccessReview preflight)', async () => {
    const restricted = cluster.standin!.restrictedKubeconfigPath;
    const run = track(devopExec(cluster, ['-t', 'deploy/echo'], ['true'], { kubeconfig: restricted }));
    expect((await run.exited).code).toBe(1);
    expect(failure(run)).toMatch(
      new RegExp(
        /^devop: RBAC: .+ may not create pods\/portforward, create jobs\.batch, get jobs\.batch, delete /.source +
          /jobs\.batch, create secrets, get secrets in namespace default — fix: ask a cluster admin /.source +
          /for a Role granting/.source,
      ),
    );
  });

  const onStandinImages = standinOnly("the old agent's image is built in the stand-in's containerd");
  onStandinImages('reports an agent that speaks another protocol version', async () => {
    // Given an agent image from another release (answers hello with protocol 999), run as an ephemeral container
    const image = await buildImage({
      // The agent image with the fixture in place of its bundle: its entrypoint runs it, as an ephemeral agent runs.
      from: AGENT_IMAGE,
      ref: 'devop.test/old-agent',
      files: {
        [AGENT_BUNDLE_PATH]: readFileSync(join(ROOT, 'test', 'e2e', 'fixtures', 'old-agent.mjs')),
        [join(dirname(AGENT_BUNDLE_PATH), 'package.json')]: '{"type":"module"}',
      },
    });
    try {
      await deployEcho(env, 'echo-old');
      const run = track(devopExec(cluster, ['-t', 'deploy/echo-old', '--ephemeral', '--agent-image', image], ['true']));
      expect((await run.exited).code).toBe(1);
      expect(failure(run)).toMatch(
        new RegExp(
          /^devop: the agent speaks protocol version 999, this devop speaks \d+ — fix: use an agent image of /.source +
            /the same devop version/.source,
        ),
      );
    } finally {
      await removeImage(image);
    }
  });

  it('says when the agent image cannot be pulled, and removes the agent Job it made', async () => {
    // A target no agent serves yet: an agent that earlier tests left on deploy/echo (it idles a few seconds) would be
    // reused, whatever --agent-image says.
    await deployEcho(env, 'echo-pull');
    const run = track(
      devopExec(cluster, ['-t', 'deploy/echo-pull', '--agent-image', 'devop.test/no-such-agent:1'], ['true']),
    );
    expect((await run.exited).code, run.output).toBe(1);
    expect(failure(run)).toMatch(
      new RegExp(
        /^devop: the agent image devop\.test\/no-such-agent:1 cannot be pulled /.source +
          /\((ErrImagePull|ImagePullBackOff|InvalidImageName).*\) — fix: check --agent-image/.source,
      ),
    );
    const jobs = await waitFor('the failed agent Job to be deleted', async () => {
      const { BatchV1Api } = await import('@kubernetes/client-node');
      const list = await env.kc.makeApiClient(BatchV1Api).listNamespacedJob({ namespace: env.namespace });
      const left = list.items.filter(
        (j) =>
          j.spec?.template.spec?.containers[0].image === 'devop.test/no-such-agent:1' && !j.metadata?.deletionTimestamp,
      );
      return left.length === 0 ? left : undefined;
    });
    expect(jobs).toEqual([]);
  });

  it("stops within seconds when the agent's namespace enforces Pod Security baseline, naming the fix", async () => {
    // Given an agent namespace labelled enforce=baseline: the Job controller cannot create the agent's hostPID pod
    // (pod-security-admission policy/check_hostNamespaces.go), it records FailedCreate on the Job instead
    const ns = 'e2e-pss-baseline';
    await env.core.createNamespace({
      body: { metadata: { name: ns, labels: { 'pod-security.kubernetes.io/enforce': 'baseline' } } },
    });
    try {
      await deployEcho(env, 'echo-pss');
      // When devop exec puts its agent there, with a startup timeout it would otherwise wait out
      const started = Date.now();
      const run = track(
        devopExec(cluster, ['-t', 'deploy/echo-pss', '--agent-namespace', ns, '--startup-timeout', '20'], ['true']),
      );
      // Then it stops long before the timeout, with one line naming the level, what it forbids and the fix
      expect((await run.exited).code, run.output).toBe(1);
      expect(Date.now() - started).toBeLessThan(15_000);
      expect(failure(run)).toMatch(
        new RegExp(
          /^devop: namespace e2e-pss-baseline enforces Pod Security "baseline:latest", which refuses the agent's pod: /
            .source +
            /.*host namespaces \(hostPID=true\).* — fix: run the agent in a namespace that allows it /.source +
            /\(--agent-namespace NS.*kubectl label ns e2e-pss-baseline pod-security.kubernetes.io\/enforce=privileged/
              .source,
        ),
      );
    } finally {
      await env.core.deleteNamespace({ name: ns }).catch(() => undefined);
    }
  });

  it('refuses a local port another process already listens on, in one line before ready', async () => {
    // Given another process (a listener of this test) that holds the local port before devop starts
    const taken = createServer((socket) => socket.destroy());
    const local = await freePort();
    await new Promise<void>((resolve) => taken.listen(local, '127.0.0.1', resolve));
    try {
      // When devop exec is to steal into that port, with a command that would listen there too
      const dir = tempDir('devop-taken-port-');
      const marker = join(dir, 'command-ran');
      const run = track(devopExec(cluster, ['-t', 'deploy/echo', '--steal', '-p', `8080:${local}`], ['touch', marker]));
      // Then it fails with one line naming the port and the fix, never says ready, and the command never ran
      expect((await run.exited).code, run.output).toBe(1);
      expect(failure(run)).toBe(
        `devop: 127.0.0.1:${local} already accepts connections from another process, before the local command ` +
          'started: the pod keeps its traffic — fix: stop that process (`ss -ltnp` names it), or map a free local ' +
          'port: -p 8080:<FREE PORT>',
      );
      expect(run.stderr).not.toMatch(/devop: ready/);
      expect(existsSync(marker)).toBe(false);
    } finally {
      taken.close();
    }
  });

  it('says when the local command is not found', async () => {
    const run = track(devopExec(cluster, ['-t', 'deploy/echo'], ['devop-no-such-command']));
    expect((await run.exited).code).toBe(1);
    expect(failure(run)).toBe(
      'devop: command not found: devop-no-such-command — fix: check the command after `--` (is it installed and on ' +
        'your PATH?)',
    );
  });

  it('devop ls lists deployments and pods with ready counts and ports, also as JSON', async () => {
    const table = track(new DevopRun(['ls', '--kubeconfig', cluster.kubeconfigPath]));
    expect((await table.exited).code, table.output).toBe(0);
    expect(table.stdout).toMatch(/^TARGET\s+READY\s+PORTS\s+CONTAINERS$/m);
    expect(table.stdout).toMatch(/^deploy\/echo\s+1\/1\s+8080\s+echo$/m);
    expect(table.stdout).toMatch(/^pod\/echo-\S+\s+1\/1\s+8080\s+echo$/m);
    const json = track(new DevopRun(['ls', '--kubeconfig', cluster.kubeconfigPath, '--output', 'json']));
    expect((await json.exited).code).toBe(0);
    const parsed = JSON.parse(json.stdout) as {
      namespace: string;
      targets: { target: string; ready: number; total: number; ports: number[] }[];
    };
    expect(parsed.namespace).toBe(env.namespace);
    expect(parsed.targets).toContainEqual(
      expect.objectContaining({ target: 'deploy/echo', ready: 1, total: 1, ports: [8080] }),
    );
  });
});
