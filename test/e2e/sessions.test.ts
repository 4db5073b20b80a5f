// `devop sessions` end to end: a running `devop exec --steal` is listed (plain and JSON) with its PID, `devop sessions
// stop ID` ends it and the pod answers its own traffic again; another user's session is refused unless asked by name,
// and then the cluster's RBAC decides (the stand-in's restricted user may read Leases, not delete them).
import { hostname, userInfo } from 'node:os';
import { CoordinationV1Api, V1MicroTime } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LEASE_ANNOTATIONS, LEASE_LABEL, LEASE_LABEL_VALUE } from '../../cli/kube/steal-lease.js';
import type { SessionRow } from '../../cli/services/sessions.js';
import { requireRoot } from '../../testkit/root.js';
import { standinOnly, type TargetCluster } from '../../testkit/target-cluster.js';
import {
  DevopRun,
  LOCAL_SERVER_COMMAND,
  deployEcho,
  devopExec,
  killLocalServer,
  startE2ETarget,
  startPodClient,
  type EchoDeployment,
  type PodClient,
} from '../../testkit/e2e.js';
import { waitFor } from '../../testkit/wait.js';
import { freePort } from '../../testkit/sockets.js';

requireRoot('e2e sessions');

describe('devop sessions', () => {
  let cluster: TargetCluster;
  let namespace: string;
  let leases: CoordinationV1Api;
  let echo: EchoDeployment;
  /** Requests come from another pod: the host is the node, whose connections count as kubelet probes. */
  let client: PodClient;
  const runs: DevopRun[] = [];
  const devop = (args: string[], kubeconfig = cluster.kubeconfigPath): DevopRun => {
    const run = new DevopRun([...args, '--kubeconfig', kubeconfig]);
    runs.push(run);
    return run;
  };

  beforeAll(async () => {
    const env = await startE2ETarget('e2e-sessions');
    cluster = env.cluster;
    namespace = env.namespace;
    leases = env.kc.makeApiClient(CoordinationV1Api);
    [echo, client] = await Promise.all([deployEcho(env, 'echo'), startPodClient(env)]);
  });

  afterAll(async () => {
    client?.close();
    await Promise.all(runs.map((r) => r.dispose()));
    await cluster?.stop();
  });

  it('lists a steal session with its PID; `sessions stop ID` ends it and the pod answers its own traffic', async () => {
    // Given devop steals the echo pod's port for a local server
    const local = await freePort();
    const exec = devopExec(
      cluster,
      ['-t', 'deploy/echo', '--steal', '-p', `8080:${local}`],
      [...LOCAL_SERVER_COMMAND],
      {
        env: { LOCAL_PORT: String(local) },
      },
    );
    runs.push(exec);
    await exec.ready();
    expect(await client.who(echo.podIP, 8080, '/stolen'), exec.output).toBe('local');

    // When the sessions are listed as JSON
    const json = devop(['sessions', '-n', namespace, '--output', 'json']);
    expect((await json.exited).code, json.output).toBe(0);
    const rows = JSON.parse(json.stdout) as SessionRow[];
    // Then the session shows its target, port, mode, holder and the PID of its devop on this machine
    const row = rows.find((r) => r.target === 'deployment/echo');
    expect(row, json.stdout).toMatchObject({
      namespace,
      ports: [8080],
      mode: 'steal',
      holder: `${userInfo().username}@${hostname()}`,
      state: 'live',
      pid: exec.child.pid,
    });
    expect(Number.isNaN(Date.parse(row?.since ?? ''))).toBe(false);
    const id = row?.id ?? '';
    expect(id).toMatch(/^[0-9a-f]{8}$/);

    // And the plain table has the same row
    const plain = devop(['sessions', '-n', namespace]);
    expect((await plain.exited).code, plain.output).toBe(0);
    expect(plain.stdout).toMatch(/^ID\s+NAMESPACE\s+TARGET\s+PORTS\s+MODE\s+HOLDER\s+SINCE\s+STATE\s+PID$/m);
    expect(plain.stdout).toMatch(
      new RegExp(
        `^${id}\\s+${namespace}\\s+deployment/echo\\s+8080\\s+steal\\s+\\S+@\\S+\\s+\\S+\\s+live\\s+${exec.child.pid}$`,
        'm',
      ),
    );

    // When it is stopped by its ID
    const stop = devop(['sessions', 'stop', id, '-n', namespace]);
    expect((await stop.exited).code, stop.output).toBe(0);
    // Then its devop has ended, saying why, and stop says so
    expect(stop.stdout).toMatch(
      new RegExp(`^stopped session ${id} \\(.+: steal of deployment/echo port 8080 in ${namespace}, since .+\\): `),
    );
    expect(stop.stdout).toContain(`its devop (PID ${exec.child.pid}) restored the pod's traffic and ended`);
    expect((await exec.exited).code, exec.output).toBe(1);
    expect(exec.stderr).toMatch(/^devop: this session was stopped: the steal lock of port 8080 \(Lease devop-steal-/m);
    // And the pod answers its own traffic again, and no session is listed
    await waitFor(
      'the pod to answer again',
      async () => ((await client.who(echo.podIP, 8080)) === echo.podName ? true : undefined),
      5000,
    );
    const after = devop(['sessions', '-n', namespace, '--output', 'json']);
    expect((await after.exited).code, after.output).toBe(0);
    expect((JSON.parse(after.stdout) as SessionRow[]).filter((r) => r.id === id)).toEqual([]);
  }, 120_000);

  it('a session killed with kill -9 is listed expired after its Lease expires; the next exec removes it', async () => {
    // Given devop steals the echo pod's port, and is killed with kill -9 (it cannot release its Lease)
    const me = `${userInfo().username}@${hostname()}`;
    const local = await freePort();
    const killed = devopExec(
      cluster,
      ['-t', 'deploy/echo', '--steal', '-p', `8080:${local}`],
      [...LOCAL_SERVER_COMMAND],
      {
        env: { LOCAL_PORT: String(local) },
      },
    );
    runs.push(killed);
    await killed.ready();
    await killed.stop('SIGKILL');
    killLocalServer(killed);
    // And an earlier run of the same user left another port's Lease on the workload, and another user an expired one
    const expiredLease = async (name: string, holder: string, port: number): Promise<void> => {
      const longAgo = new V1MicroTime(Date.now() - 60_000);
      await leases.createNamespacedLease({
        namespace,
        body: {
          metadata: {
            name,
            labels: { [LEASE_LABEL]: LEASE_LABEL_VALUE },
            annotations: { [LEASE_ANNOTATIONS.workload]: 'deployment/echo', [LEASE_ANNOTATIONS.port]: String(port) },
          },
          spec: { holderIdentity: holder, leaseDurationSeconds: 15, acquireTime: longAgo, renewTime: longAgo },
        },
      });
    };
    await expiredLease('devop-steal-deployment-echo-9091-mine', `${me}#0badf00d`, 9091);
    await expiredLease('devop-steal-deployment-echo-9092-carol', 'carol@desk#0c0c0c0c', 9092);
    const sessions = async (): Promise<SessionRow[]> => {
      const list = devop(['sessions', '-n', namespace, '--output', 'json']);
      expect((await list.exited).code, list.output).toBe(0);
      return (JSON.parse(list.stdout) as SessionRow[]).filter((r) => r.target === 'deployment/echo');
    };

    // When its Lease's renewTime + leaseDurationSeconds has passed (as kube-apiserver's lease GC reads it:
    // pkg/controlplane/controller/apiserverleasegc/gc_controller.go isLeaseExpired)
    const dead = await waitFor(
      'the killed session to be listed expired',
      async () => (await sessions()).find((r) => r.holder === me && r.ports.includes(8080) && r.state === 'expired'),
      30_000,
    );
    // Then `devop sessions` lists it expired, without a PID (its devop is gone)
    expect(dead.pid).toBeUndefined();
    const plain = devop(['sessions', '-n', namespace]);
    expect((await plain.exited).code, plain.output).toBe(0);
    expect(plain.stdout).toMatch(
      new RegExp(
        `^${dead.id}\\s+${namespace}\\s+deployment/echo\\s+8080\\s+steal\\s+\\S+\\s+\\S+\\s+expired\\s+-$`,
        'm',
      ),
    );

    // (The agent still keeps the killed session's steals for its resume grace, 30 s: a session of the same user@host
    // takes them over, so nothing here waits for it.)
    // When the same user runs devop exec on the same target again
    const next = devopExec(
      cluster,
      ['-t', 'deploy/echo', '--steal', '-p', `8080:${local}`],
      [...LOCAL_SERVER_COMMAND],
      {
        env: { LOCAL_PORT: String(local) },
      },
    );
    runs.push(next);
    await next.ready();
    expect(await client.who(echo.podIP, 8080, '/again'), next.output).toBe('local');
    // Then its own expired Leases on the workload are gone (the killed run's taken over, the other port's removed, and
    // said so); the only session of this user there is the new live one, and another user's expired Lease stays
    const rows = await sessions();
    expect(
      rows.filter((r) => r.holder === me),
      JSON.stringify(rows),
    ).toEqual([expect.objectContaining({ ports: [8080], state: 'live', pid: next.child.pid })]);
    expect(next.stderr).toMatch(
      /^devop: removed the expired steal lock of port 9091 \(Lease devop-steal-deployment-echo-9091-mine\)/m,
    );
    expect(rows.filter((r) => r.holder === 'carol@desk')).toEqual([
      expect.objectContaining({ ports: [9092], state: 'expired' }),
    ]);

    // When that run is killed with kill -9 too, and the same user runs devop exec again at once (its Lease still live)
    await next.stop('SIGKILL');
    killLocalServer(next);
    const third = devopExec(
      cluster,
      ['-t', 'deploy/echo', '--steal', '-p', `8080:${local}`],
      [...LOCAL_SERVER_COMMAND],
      {
        env: { LOCAL_PORT: String(local) },
      },
    );
    runs.push(third);
    await third.ready();
    // Then it takes the lock over without waiting for the Lease to expire, says so, and steals the port
    expect(third.stderr).toMatch(
      new RegExp(
        `^devop: took over the steal lock \\(Lease \\S+\\) of your earlier devop \\(PID ${next.child.pid}\\)`,
        'm',
      ),
    );
    expect(await client.who(echo.podIP, 8080, '/third'), third.output).toBe('local');
    await third.stop('SIGTERM');
    await leases.deleteNamespacedLease({ name: 'devop-steal-deployment-echo-9092-carol', namespace });
  }, 120_000);

  const onStandinRbac = standinOnly("the restricted user is the stand-in's");
  onStandinRbac(
    "refuses another user's session unless asked by name; then the cluster's RBAC decides",
    async () => {
      // Given alice steals port 9090 of deployment/echo from her laptop (her Lease, renewed a moment ago)
      const name = 'devop-steal-deployment-echo-9090-alice';
      const now = new V1MicroTime(Date.now());
      await leases.createNamespacedLease({
        namespace,
        body: {
          metadata: {
            name,
            labels: { [LEASE_LABEL]: LEASE_LABEL_VALUE },
            annotations: { [LEASE_ANNOTATIONS.workload]: 'deployment/echo', [LEASE_ANNOTATIONS.port]: '9090' },
          },
          spec: {
            holderIdentity: 'alice@laptop#0a1b2c3d',
            leaseDurationSeconds: 600,
            acquireTime: now,
            renewTime: now,
          },
        },
      });
      const stillThere = async (): Promise<string | undefined> =>
        (await leases.readNamespacedLease({ name, namespace })).spec?.holderIdentity;

      // When someone else stops it without asking for another user's session by name
      const mine = devop(['sessions', 'stop', '0a1b2c3d', '-n', namespace]);
      // Then it is refused in one line naming whose it is and the flag that asks for it
      expect((await mine.exited).code, mine.output).toBe(1);
      expect(mine.stderr).toMatch(
        new RegExp(
          /^devop: session 0a1b2c3d is alice@laptop's \(steal of deployment\/echo port 9090 in \S+, since \S+\), /
            .source + /not yours — fix: .*`devop sessions stop 0a1b2c3d --force`/.source,
        ),
      );
      expect(mine.stderr.trim().split('\n')).toHaveLength(1);
      expect(await stillThere()).toBe('alice@laptop#0a1b2c3d');

      // When a user who may read Leases but not delete them lists and then stops it with --force
      const restricted = cluster.standin!.restrictedKubeconfigPath;
      const list = devop(['sessions', '--output', 'json'], restricted);
      expect((await list.exited).code, list.output).toBe(0);
      expect((JSON.parse(list.stdout) as SessionRow[]).map((r) => r.holder)).toContain('alice@laptop');
      const forced = devop(['sessions', 'stop', '0a1b2c3d', '--force'], restricted);
      // Then the cluster refuses, and the line says whose session it is and what permission is missing
      expect((await forced.exited).code, forced.output).toBe(1);
      expect(forced.stderr).toMatch(
        new RegExp(
          /^devop: forbidden: cannot delete Lease devop-steal-deployment-echo-9090-alice of session 0a1b2c3d, /.source +
            /which is alice@laptop's .* — fix: ask a cluster admin for RBAC permission to "delete" on /.source +
            /"leases\.coordination\.k8s\.io"/.source,
        ),
      );
      expect(await stillThere()).toBe('alice@laptop#0a1b2c3d');

      // When a user with that permission asks by name
      const admin = devop(['sessions', 'stop', '0a1b2c3d', '-n', namespace, '--force']);
      // Then alice's Lease is gone (her devop ends at its next renewal)
      expect((await admin.exited).code, admin.output).toBe(0);
      expect(admin.stdout).toMatch(/its devop ends within 5 s, at its next renewal/);
      await expect(stillThere()).rejects.toMatchObject({ code: 404 });
    },
    60_000,
  );
});
