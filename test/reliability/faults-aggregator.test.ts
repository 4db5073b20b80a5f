// The fault table's aggregator rows: an APIService served by devop's local command (the walkthrough's farm-operator
// step 3 under `devop exec -t apiservice/… --steal`), then devop killed with kill -9, or stopped with Ctrl-C. The API
// server's aggregator must reach the step-1 pod again within 2 s, and no request after that may fail (a 503 or a
// timeout from a connection the aggregator kept to the dead path), on a quiet machine and with every core busy.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ClusterHandle } from '../../standin/index.js';
import { rawRequest } from '../../testkit/api-requests.js';
import { requireRoot } from '../../testkit/root.js';
import { freePort } from '../../testkit/sockets.js';
import { startTargetCluster, type TargetCluster } from '../../testkit/target-cluster.js';
import { devopFarmStep3, eventually, Kubectl, type LocalProcess } from '../examples/harness.js';
import { hogEveryCore, RECOVERY_BUDGET_MS } from './harness.js';

requireRoot('reliability: the aggregator fault row');

const CASE_MS = 240_000;
/** How often the probe asks the aggregated API, and how long one request may take before it counts as lost. */
const PROBE_EVERY_MS = 100;
const PROBE_TIMEOUT_MS = 1000;
/** After the pod answers again, every request of this long must be answered by it. */
const STEADY_MS = 3000;
const LLAMAS = '/apis/farm.example.com/v1alpha/namespaces/default/llamas';

type Probe = 'local' | 'pod' | `lost: ${string}`;

describe('fault table: the aggregator path (APIService) when devop ends', () => {
  let cluster: TargetCluster;
  let standin: ClusterHandle;
  let kubectl: Kubectl;
  const dir = mkdtempSync(join(tmpdir(), 'devop-faults-aggregator-'));
  const runs: LocalProcess[] = [];

  beforeAll(async () => {
    cluster = await startTargetCluster('faults-aggregator', { namespace: 'default' });
    if (!cluster.standin) throw new Error('the aggregator fault row runs on the stand-in only (it times its node)');
    standin = cluster.standin;
    kubectl = new Kubectl(cluster.kubeconfigPath);
    await kubectl.ok('apply', '-f', 'examples/farm-operator/app.yaml');
    await kubectl.ok('rollout', 'status', 'deployment/farm-operator', '--timeout=120s');
    await eventually('the APIService to be Available', async () =>
      /default\/farm-operator\s+True/.test(await kubectl.ok('get', 'apiservice', 'v1alpha.farm.example.com'))
        ? true
        : undefined,
    );
  }, CASE_MS);

  afterAll(async () => {
    for (const run of runs) await run.stop('SIGKILL', 2000);
    rmSync(dir, { recursive: true, force: true });
    kubectl?.dispose();
    await cluster?.stop();
  });

  /** Who answered a list of llamas through the API server: step 3 (local) lists them, step 1 (the pod) has none. */
  async function probe(): Promise<Probe> {
    const answer = await Promise.race([
      rawRequest(standin, standin.adminToken, 'GET', LLAMAS).catch((err: Error) => err),
      new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), PROBE_TIMEOUT_MS)),
    ]);
    if (answer === 'timeout') return `lost: no answer in ${PROBE_TIMEOUT_MS} ms`;
    if (answer instanceof Error) return `lost: ${answer.message}`;
    if (answer.status === 200) return 'local';
    if (answer.status === 404) return 'pod';
    return `lost: ${answer.status} ${answer.text.slice(0, 120)}`;
  }

  const cases = [
    { how: 'kill -9 of devop', busy: false, row: 'kill9_cli_aggregator' },
    { how: 'kill -9 of devop', busy: true, row: 'kill9_cli_aggregator' },
    { how: 'Ctrl-C', busy: true, row: 'sigint_aggregator' },
  ] as const;
  for (const { how, busy, row } of cases) {
    it(
      `${how}${busy ? ', with every core busy' : ''}: the pod answers the aggregator within 2 s, none lost`,
      async () => {
        // Given devop serving the APIService from step 3 on this machine (retried while a killed run's Lease expires)
        const local = await freePort();
        const run = await eventually(
          'devop to be ready',
          async () => {
            const attempt = devopFarmStep3(cluster.kubeconfigPath, local, join(dir, `${busy}.har`));
            runs.push(attempt);
            const ready = await eventually(
              'ready or refused',
              async () => (attempt.stderr.includes('devop: ready') ? true : attempt.running ? undefined : false),
              90_000,
            );
            if (ready) return attempt;
            await attempt.stop('SIGKILL', 2000);
            return undefined;
          },
          120_000,
        );
        await eventually('the local command to answer the aggregator', async () =>
          (await probe()) === 'local' ? true : undefined,
        );
        const stopHogs = busy ? hogEveryCore() : () => undefined;
        try {
          // When devop is killed with kill -9 (the local command is left running, as an orphan), or Ctrl-C stops both
          const killedAt = Date.now();
          if (how === 'Ctrl-C') process.kill(-(run.child.pid ?? 0), 'SIGINT');
          else run.child.kill('SIGKILL');
          // Then the aggregator reaches the step-1 pod within 2 s
          const seen: { at: number; probe: Probe }[] = [];
          let recoveredAt: number | undefined;
          while (Date.now() - killedAt < 30_000) {
            const started = Date.now();
            const p = await probe();
            seen.push({ at: started - killedAt, probe: p });
            if (recoveredAt === undefined && p === 'pod') recoveredAt = Date.now();
            if (recoveredAt !== undefined && Date.now() - recoveredAt > STEADY_MS) break;
            await new Promise((r) => setTimeout(r, PROBE_EVERY_MS));
          }
          const recovered = recoveredAt === undefined ? Number.POSITIVE_INFINITY : recoveredAt - killedAt;
          const after = seen.filter((s) => recoveredAt !== undefined && s.at + killedAt >= recoveredAt);
          const lost = after.filter((s) => s.probe !== 'pod');
          console.log(
            `RESULT fault${busy ? '_busy' : ''} ${row} recovered_ms=${recovered} ` +
              `lost_after=${lost.length} probes=${seen.length}`,
          );
          const trail = seen.map((s) => `${s.at} ms ${s.probe}`).join('\n');
          expect(recovered, trail).toBeLessThanOrEqual(RECOVERY_BUDGET_MS);
          expect(lost, trail).toEqual([]);
        } finally {
          stopHogs();
          await run.stop('SIGKILL', 2000);
        }
      },
      CASE_MS,
    );
  }
});
