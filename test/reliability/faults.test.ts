// The fault table (DESIGN.md "Failure rules"), against the stand-in with real netns and iptables: kill -9 of the CLI,
// kill -9 of the agent, deleting the agent pod, cutting the port-forward, deleting the target pod. Each case checks
// that the pod serves its own traffic again within 2 s (or, for a cut tunnel, that the port keeps answering), that
// devop recovers without restarting the local command, and that no devop rule (iptables DEVOP-* chain or nft devop_*
// table) is left in the pod's netns. The whole table runs twice: on a quiet machine, and while busy loops keep every
// core busy (a shared cluster's nodes are busy: the 2 s must hold there too).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_ANNOTATIONS, chainName } from '../../shared/agent-contract.js';
import { tableName } from '../../agent/native/nft-owned.js';
import { requireRoot } from '../../testkit/root.js';
import {
  type DevopRun,
  LOCAL_SERVER_COMMAND,
  devopExec,
  killLocalServer,
  startE2ECluster,
  startPodClient,
  type Cluster,
  type PodClient,
} from '../../testkit/e2e.js';
import {
  RECOVERY_BUDGET_MS,
  hogEveryCore,
  agentNodePids,
  agentPods,
  deployReplicas,
  devopRules,
  dialRelayPids,
  firstAnswerAfter,
  podPid,
  readyPods,
  recoveredAfter,
  type Env,
} from './harness.js';
import { waitFor } from '../../testkit/wait.js';
import { freePort } from '../../testkit/sockets.js';

requireRoot('reliability: fault table');

/** Generous per case: each starts agents and waits for devop to recover, on a machine shared with other suites. */
const CASE_MS = 180_000;

describe.each([
  { busy: false, title: '', tag: '' },
  { busy: true, title: ', with every core busy', tag: '_busy' },
])(
  'fault table$title: the pod serves its own traffic again within 2 s, devop recovers, no rule is left',
  ({ busy, tag }) => {
    let cluster: Cluster;
    let env: Env;
    let client: PodClient;
    const runs: DevopRun[] = [];
    let stopHogs = (): void => undefined;

    beforeAll(async () => {
      const e = await startE2ECluster();
      cluster = e.cluster;
      env = e;
      client = await startPodClient(e);
      if (busy) stopHogs = hogEveryCore();
    });

    afterAll(async () => {
      stopHogs();
      for (const r of runs) {
        await r.stop('SIGKILL');
        killLocalServer(r);
      }
      await cluster?.stop();
    });

    /** A one-pod deployment named `name`, stolen by a devop run whose local server answers "local". */
    async function stealOne(name: string): Promise<{ run: DevopRun; podName: string; podIP: string; pid: number }> {
      const [pod] = await deployReplicas(env, name, 1);
      const podName = pod.metadata?.name ?? '';
      const podIP = pod.status?.podIP ?? '';
      expect(await client.who(podIP, 8080)).toBe(podName);
      const local = await freePort();
      const run = devopExec(
        cluster,
        ['-t', `deploy/${name}`, '--steal', '-p', `8080:${local}`],
        [...LOCAL_SERVER_COMMAND],
        { env: { LOCAL_PORT: String(local) } },
      );
      runs.push(run);
      await run.ready();
      expect(await client.who(podIP, 8080)).toBe('local');
      const pid = await podPid(pod);
      expect((await devopRules(pid)).length, 'the steal installed its rules').toBeGreaterThan(0);
      return { run, podName, podIP, pid };
    }

    /** Stops devop normally: the pod answers itself within 2 s and its netns holds no DEVOP rule. */
    async function stopAndCheckClean(run: DevopRun, podName: string, podIP: string, pid: number): Promise<void> {
      const stoppedAt = Date.now();
      await run.stop('SIGTERM');
      expect(await recoveredAfter(stoppedAt, () => client.who(podIP, 8080), podName)).toBeLessThanOrEqual(
        RECOVERY_BUDGET_MS + 5000,
      );
      await waitFor('no DEVOP rule in the pod netns', async () => (await devopRules(pid)).length === 0, 30_000);
    }

    /** How many times the local command started (it must never be restarted by a recovery). */
    const starts = (run: DevopRun): number =>
      run.stdout.split('\n').filter((l) => l.includes('"seen":"listening"')).length;

    it(
      'kill -9 of the CLI: the pod answers within 2 s; the rules go when the agent gives the session up',
      async () => {
        const { run, podName, podIP, pid } = await stealOne('f-cli');
        const killedAt = Date.now();
        run.child.kill('SIGKILL');
        await run.exited;
        const ms = await recoveredAfter(killedAt, () => client.who(podIP, 8080), podName);
        killLocalServer(run);
        console.log(`RESULT fault${tag} kill9_cli recovered_ms=${ms}`);
        expect(ms).toBeLessThanOrEqual(RECOVERY_BUDGET_MS);
        // The agent keeps the session for its resume grace period (traffic goes to the pod meanwhile), then removes it
        // all.
        await waitFor('no DEVOP rule in the pod netns', async () => (await devopRules(pid)).length === 0, 120_000);
      },
      CASE_MS,
    );

    it(
      'kill -9 of the agent: its rules die with it (owned nft table) within 2 s; devop starts a new agent and steals ' +
        'again',
      async () => {
        const { run, podName, podIP, pid } = await stealOne('f-agent');
        const [agent] = await agentPods(env, podName);
        const agentId = agent.metadata?.annotations?.[AGENT_ANNOTATIONS.agentId] ?? '';
        expect(agentId).not.toBe('');
        // The dead agent's rules, whichever backend it used: its owned table devop_<id>, or its fallback chain
        // DEVOP-<id>.
        const names = [`table inet ${tableName(agentId)} `, chainName(agentId)];
        const left = async (): Promise<string[]> =>
          (await devopRules(pid)).filter((l) => names.some((n) => l.includes(n)));
        // The agent runs the default backend here: its rules are in its owned nft table (the kernel's cleanup is what
        // is tested).
        expect(
          (await left()).some((l) => l.startsWith(names[0])),
          "the agent's owned table before the kill",
        ).toBe(true);
        const pids = await agentNodePids(agent);
        expect(pids.length).toBeGreaterThan(0);
        // The CLI is frozen meanwhile: a new agent of its own would remove a stale chain too, and hide whether the dead
        // agent's rules went by themselves (the guarantee must hold when nothing else is left to clean up).
        const cliPid = run.child.pid ?? 0;
        process.kill(cliPid, 'SIGSTOP');
        let ms: number;
        try {
          const killedAt = Date.now();
          for (const p of pids) process.kill(p, 'SIGKILL');
          // Infinity: not within 5 s (nothing but the dead agent's own cleanup can help while the CLI is frozen).
          ms = await recoveredAfter(killedAt, () => client.who(podIP, 8080), podName, 5000).catch(
            () => Number.POSITIVE_INFINITY,
          );
          console.log(`RESULT fault${tag} kill9_agent recovered_ms=${ms}`);
          await waitFor(
            `the dead agent's rules (${names.join(', ')}) to be gone`,
            async () => (await left()).length === 0,
            10_000,
          ).catch(() => undefined);
          console.log(`RESULT fault${tag} kill9_agent chain_left=${(await left()).length > 0}`);
        } finally {
          process.kill(cliPid, 'SIGCONT');
        }
        expect(ms, 'the pod answers again within 2 s of the kill').toBeLessThanOrEqual(RECOVERY_BUDGET_MS);
        expect(await left(), 'no rule of the dead agent is left').toEqual([]);
        // devop notices, starts a new agent and steals again, with the same local command.
        await run.waitForStderr(/started a new agent devop-agent-\S+|using agent devop-agent-\S+/, 90_000);
        await run.waitForStderr(
          /reconnected to pod \S+ after [\d.]+ s \(new session, 1 subscription restored\)/,
          90_000,
        );
        await waitFor('the local command to answer again', async () => (await client.who(podIP, 8080)) === 'local');
        expect(starts(run)).toBe(1);
        await stopAndCheckClean(run, podName, podIP, pid);
      },
      CASE_MS,
    );

    it(
      'deleting the agent pod: the pod answers within 2 s; devop starts a new agent and steals again',
      async () => {
        const { run, podName, podIP, pid } = await stealOne('f-agentpod');
        const [agent] = await agentPods(env, podName);
        const deletedAt = Date.now();
        await env.core.deleteNamespacedPod({
          name: agent.metadata?.name ?? '',
          namespace: 'default',
          gracePeriodSeconds: 0,
        });
        const ms = await recoveredAfter(deletedAt, () => client.who(podIP, 8080), podName);
        console.log(`RESULT fault${tag} delete_agent_pod recovered_ms=${ms}`);
        expect(ms).toBeLessThanOrEqual(RECOVERY_BUDGET_MS);
        await run.waitForStderr(
          /reconnected to pod \S+ after [\d.]+ s \(new session, 1 subscription restored\)/,
          90_000,
        );
        await waitFor('the local command to answer again', async () => (await client.who(podIP, 8080)) === 'local');
        expect(starts(run)).toBe(1);
        await stopAndCheckClean(run, podName, podIP, pid);
      },
      CASE_MS,
    );

    it(
      "a stalled tunnel (the node's port-forward relay stopped for 20 s): the pod answers new connections within " +
        '2 s; devop steals again after',
      async () => {
        const { run, podName, podIP, pid } = await stealOne('f-stall');
        const relays = await dialRelayPids(pid);
        expect(relays.length, "the stand-in's dial relay into the pod").toBeGreaterThan(0);
        const stoppedAt = Date.now();
        for (const r of relays) process.kill(r, 'SIGSTOP');
        let ms: number;
        try {
          // A connection the session took just before the stall waits with it; new ones must reach the pod.
          ms = await firstAnswerAfter(stoppedAt, () => client.who(podIP, 8080), podName);
          console.log(`RESULT fault${tag} stalled_tunnel recovered_ms=${ms}`);
          await new Promise((r) => setTimeout(r, Math.max(0, 20_000 - (Date.now() - stoppedAt))));
          expect(await client.who(podIP, 8080), 'the pod still answers at the end of the stall').toBe(podName);
        } finally {
          for (const r of relays) process.kill(r, 'SIGCONT');
        }
        expect(ms).toBeLessThanOrEqual(RECOVERY_BUDGET_MS);
        await waitFor(
          'the local command to answer again',
          async () => (await client.who(podIP, 8080)) === 'local',
          90_000,
        );
        expect(starts(run)).toBe(1);
        await stopAndCheckClean(run, podName, podIP, pid);
      },
      CASE_MS,
    );

    it(
      'cutting the port-forward: the port keeps answering, devop reconnects and resumes the session',
      async () => {
        const { run, podName, podIP, pid } = await stealOne('f-tunnel');
        const cutAt = Date.now();
        cluster.dropWebSockets();
        // Someone answers the port all along (the pod while the tunnel is down, then the local command).
        const ms = await Promise.any([
          recoveredAfter(cutAt, () => client.who(podIP, 8080), podName),
          recoveredAfter(cutAt, () => client.who(podIP, 8080), 'local'),
        ]);
        console.log(`RESULT fault${tag} cut_tunnel answered_ms=${ms}`);
        expect(ms).toBeLessThanOrEqual(RECOVERY_BUDGET_MS);
        await run.waitForStderr(/tunnel to pod \S+ lost.*reconnecting…/);
        await run.waitForStderr(/reconnected to pod \S+ after [\d.]+ s \(session resumed\)/);
        await waitFor('the local command to answer again', async () => (await client.who(podIP, 8080)) === 'local');
        expect(starts(run)).toBe(1);
        await stopAndCheckClean(run, podName, podIP, pid);
      },
      CASE_MS,
    );

    it(
      'deleting the target pod: devop follows the new pod without restarting the local command',
      async () => {
        const { run, podName } = await stealOne('f-follow');
        await env.core.deleteNamespacedPod({ name: podName, namespace: 'default', gracePeriodSeconds: 0 });
        const [next] = await readyPods(env, 'f-follow', 1, [podName]);
        const nextName = next.metadata?.name ?? '';
        const nextIP = next.status?.podIP ?? '';
        await run.waitForStderr(new RegExp(`following deploy/f-follow: now pod ${nextName}`), 90_000);
        // The session line names the new pod (what the TUI header and JSON consumers show).
        await run.waitForStderr(new RegExp(`session deploy/f-follow pod/${nextName}:`));
        await waitFor('the new pod to be stolen', async () => (await client.who(nextIP, 8080)) === 'local');
        expect(starts(run)).toBe(1);
        await stopAndCheckClean(run, nextName, nextIP, await podPid(next));
      },
      CASE_MS,
    );
  },
);
