// The stand-in kubelet against a live API server: pods become containerd containers (from the repo's images) in network
// namespaces with the env, cgroups, restarts, readiness, logs, exec, port-forward dialling and deletion of a real node.
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CoreV1Api, V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import type { ClusterHandle, NodeRuntime } from '../../standin/index.js';
import {
  execOutput,
  isReady,
  pidsOfContainer,
  readAll,
  removeImage,
  tagImage,
  waitForPod,
} from '../../testkit/pods.js';
import { withStandinNode } from '../../testkit/standin-node.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('stand-in kubelet');

let cluster: ClusterHandle;
let core: CoreV1Api;
let runtime: NodeRuntime;
let scratch: string;
/** node in the images (devop.test/shell, http-echo, the agent): not the host's. */
const NODE = '/usr/local/bin/node';

function podName(prefix: string): string {
  return `${prefix}-${randomBytes(3).toString('hex')}`;
}

async function createPod(body: V1Pod): Promise<V1Pod> {
  return core.createNamespacedPod({ namespace: 'default', body });
}

function containerID(pod: V1Pod, name?: string): string {
  const status = pod.status?.containerStatuses?.find((c) => !name || c.name === name);
  return status?.containerID ?? '';
}

withStandinNode((node) => {
  ({ cluster, core, runtime } = node);
});

beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), 'devop-kubelet-test-'));
});

afterAll(() => {
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

describe('stand-in kubelet', () => {
  it('serves HTTP from the container on the pod IP; probes come from the node IP', async () => {
    // Given an http-echo pod with an HTTP readiness probe
    const name = podName('echo');
    await createPod({
      metadata: { name },
      spec: {
        containers: [
          {
            name: 'echo',
            image: 'devop.test/http-echo',
            ports: [{ name: 'http', containerPort: 8080 }],
            readinessProbe: { httpGet: { path: '/ready', port: 'http' }, periodSeconds: 1 },
          },
        ],
      },
    });
    // When it is Ready
    const pod = await waitForPod(core, name, 'Ready', isReady);
    // Then the host reaches the container by pod IP, and the status is the one a node reports
    const res = await fetch(`http://${pod.status!.podIP}:8080/hello?x=1`, { method: 'POST', body: 'ping' });
    const echoed = (await res.json()) as {
      pod: string;
      method: string;
      path: string;
      body: string;
      remoteAddress: string;
    };
    expect(echoed).toMatchObject({ pod: name, method: 'POST', path: '/hello?x=1', body: 'ping' });
    expect(echoed.remoteAddress).toBe(cluster.nodeIP);
    expect(pod.status).toMatchObject({ phase: 'Running', hostIP: cluster.nodeIP });
    expect(pod.status!.podIPs![0]).toEqual({ ip: pod.status!.podIP });
    expect(pod.status!.podIP).not.toBe(cluster.nodeIP);
    expect(runtime.podCIDR.startsWith(pod.status!.podIP!.split('.').slice(0, 3).join('.'))).toBe(true);
    const types = (pod.status!.conditions ?? [])
      .filter((c) => c.status === 'True')
      .map((c) => c.type)
      .sort();
    expect(types).toEqual(['ContainersReady', 'Initialized', 'PodReadyToStartContainers', 'PodScheduled', 'Ready']);
    const cs = pod.status!.containerStatuses![0];
    expect(cs).toMatchObject({
      name: 'echo',
      ready: true,
      started: true,
      restartCount: 0,
      image: 'devop.test/http-echo',
    });
    expect(cs.containerID).toMatch(/^containerd:\/\/[0-9a-f]{64}$/);
    expect(cs.state?.running?.startedAt).toBeTruthy();
    // And the readiness probe's requests came from the node IP, as kube-probe
    const log = await readAll(
      await runtime.logs({ namespace: 'default', pod: name, container: 'echo', follow: false }),
    );
    expect(log).toContain(`http-echo ${name} listening on 8080`);
    expect(log).toMatch(new RegExp(`^GET /ready from ${cluster.nodeIP.replace(/\./g, '\\.')} kube-probe/`, 'm'));
  });

  it('gives the container the env of its spec, configmaps, secrets and the service env vars', async () => {
    // Given a configmap, a secret and a service in the namespace
    await core.createNamespacedConfigMap({
      namespace: 'default',
      body: { metadata: { name: 'app-config' }, data: { GREETING: 'hello from configmap', LEVEL: 'debug' } },
    });
    await core.createNamespacedSecret({
      namespace: 'default',
      body: { metadata: { name: 'app-secret' }, data: { password: Buffer.from('s3cr3t').toString('base64') } },
    });
    const svc = await core.createNamespacedService({
      namespace: 'default',
      body: {
        metadata: { name: 'my-db' },
        spec: { selector: { app: 'nothing' }, ports: [{ name: 'pg', port: 5432, targetPort: 5432 }] },
      },
    });
    const name = podName('env');
    // When a pod that uses them starts (env printed to its log, then it stays up)
    await createPod({
      metadata: { name, labels: { team: 'a' } },
      spec: {
        containers: [
          {
            name: 'main',
            image: 'busybox',
            command: ['sh', '-c', 'env; sleep 3600'],
            env: [
              { name: 'FROM_CM', valueFrom: { configMapKeyRef: { name: 'app-config', key: 'GREETING' } } },
              { name: 'PASSWORD', valueFrom: { secretKeyRef: { name: 'app-secret', key: 'password' } } },
              { name: 'MY_POD', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
              { name: 'MY_NS', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
              { name: 'MY_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
              { name: 'MY_NODE', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
              { name: 'COMPOSED', value: 'pod=$(MY_POD)' },
            ],
            envFrom: [{ configMapRef: { name: 'app-config' }, prefix: 'CFG_' }],
          },
        ],
      },
    });
    const pod = await waitForPod(core, name, 'Running', (p) => p.status?.phase === 'Running');
    const env = await waitFor('env in the log', async () => {
      const text = await readAll(await runtime.logs({ namespace: 'default', pod: name, follow: false }));
      return text.includes('PATH=') ? text : undefined;
    });
    const vars = Object.fromEntries(
      env
        .trim()
        .split('\n')
        .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
    );
    // Then
    expect(vars).toMatchObject({
      FROM_CM: 'hello from configmap',
      CFG_GREETING: 'hello from configmap',
      CFG_LEVEL: 'debug',
      PASSWORD: 's3cr3t',
      MY_POD: name,
      MY_NS: 'default',
      MY_IP: pod.status!.podIP,
      MY_NODE: cluster.nodeName,
      COMPOSED: `pod=${name}`,
      HOSTNAME: name,
      MY_DB_SERVICE_HOST: svc.spec!.clusterIP,
      MY_DB_SERVICE_PORT: '5432',
      MY_DB_SERVICE_PORT_PG: '5432',
      MY_DB_PORT: `tcp://${svc.spec!.clusterIP}:5432`,
      MY_DB_PORT_5432_TCP_ADDR: svc.spec!.clusterIP,
      MY_DB_PORT_5432_TCP_PORT: '5432',
      MY_DB_PORT_5432_TCP_PROTO: 'tcp',
      KUBERNETES_SERVICE_PORT: '443',
    });
    expect(vars.KUBERNETES_SERVICE_HOST).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    expect(vars.PATH).toContain('/usr/bin');
  });

  it('reports a missing configmap as CreateContainerConfigError, then starts once it exists', async () => {
    const name = podName('cfgwait');
    await createPod({
      metadata: { name },
      spec: {
        containers: [
          {
            name: 'main',
            image: 'busybox',
            command: ['sleep', '3600'],
            env: [{ name: 'X', valueFrom: { configMapKeyRef: { name: `${name}-cm`, key: 'x' } } }],
          },
        ],
      },
    });
    const waiting = await waitForPod(
      core,
      name,
      'CreateContainerConfigError',
      (p) => p.status?.containerStatuses?.[0]?.state?.waiting?.reason === 'CreateContainerConfigError',
    );
    expect(waiting.status!.containerStatuses![0].state!.waiting!.message).toContain(`configmap "${name}-cm" not found`);
    expect(waiting.status!.phase).toBe('Pending');
    await core.createNamespacedConfigMap({
      namespace: 'default',
      body: { metadata: { name: `${name}-cm` }, data: { x: '1' } },
    });
    await waitForPod(core, name, 'Running', (p) => p.status?.phase === 'Running');
  });

  // kubelet's makeEnvironmentVariables (kubernetes/kubernetes pkg/kubelet/kubelet_pods.go) returns the secret
  // manager's NotFound for a missing, non-optional secretKeyRef (pkg/kubelet/secret/secret_manager.go: group resource
  // "secret", hence `secret "x" not found`); the sync fails with CreateContainerConfigError and the pod worker tries
  // again. devop's agent Job starts before the Secret that holds its token (owned by the Job,
  // whose uid it needs): it relies on exactly this.
  it('reports a missing secret as CreateContainerConfigError, then starts once it exists', async () => {
    const name = podName('secwait');
    await createPod({
      metadata: { name },
      spec: {
        containers: [
          {
            name: 'main',
            image: 'busybox',
            command: ['sleep', '3600'],
            env: [{ name: 'TOKEN', valueFrom: { secretKeyRef: { name: `${name}-secret`, key: 'token' } } }],
          },
        ],
      },
    });
    const waiting = await waitForPod(
      core,
      name,
      'CreateContainerConfigError',
      (p) => p.status?.containerStatuses?.[0]?.state?.waiting?.reason === 'CreateContainerConfigError',
    );
    expect(waiting.status!.containerStatuses![0].state!.waiting!.message).toBe(`secret "${name}-secret" not found`);
    await core.createNamespacedSecret({
      namespace: 'default',
      body: { metadata: { name: `${name}-secret` }, data: { token: Buffer.from('t').toString('base64') } },
    });
    await waitForPod(core, name, 'Running', (p) => p.status?.phase === 'Running');
  });

  it('dials 127.0.0.1 inside the pod: a loopback-only listener carries 10 MiB byte-exact', async () => {
    // Given a pod whose process echoes bytes on 127.0.0.1:7000 only
    const name = podName('loop');
    await createPod({
      metadata: { name },
      spec: {
        containers: [
          {
            name: 'main',
            image: 'devop.test/shell',
            command: [
              NODE,
              '-e',
              "require('net').createServer((s) => s.pipe(s)).listen(7000, '127.0.0.1', () => console.log('up'))",
            ],
          },
        ],
      },
    });
    const pod = await waitForPod(core, name, 'Running', (p) => p.status?.phase === 'Running');
    await waitFor('echo listening', async () =>
      (await readAll(await runtime.logs({ namespace: 'default', pod: name, follow: false }))).includes('up'),
    );
    // Then it is not reachable on the pod IP from the host …
    const refused = await fetch(`http://${pod.status!.podIP}:7000/`).then(
      () => 'connected',
      (e: Error & { cause?: { code?: string } }) => e.cause?.code,
    );
    expect(refused).toBe('ECONNREFUSED');
    // … but dialPod reaches it, and 10 MiB come back byte-exact
    const socket = await runtime.dialPod('default', name, 7000);
    const payload = randomBytes(10 * 1024 * 1024);
    const received: Buffer[] = [];
    let size = 0;
    const done = new Promise<void>((resolve, reject) => {
      socket.on('data', (c: Buffer) => {
        received.push(c);
        size += c.length;
        if (size >= payload.length) resolve();
      });
      socket.on('error', reject);
    });
    socket.write(payload);
    await done;
    socket.destroy();
    const digest = (b: Buffer) => createHash('sha256').update(b).digest('hex');
    expect(size).toBe(payload.length);
    expect(digest(Buffer.concat(received))).toBe(digest(payload));
    // And a closed port is an error, not a hang
    await expect(runtime.dialPod('default', name, 7001)).rejects.toThrow(/ECONNREFUSED|refused/);
  });

  it('puts the container process in a cgroup named after its container ID, found through /proc/<pid>/cgroup', async () => {
    const name = podName('cg');
    await createPod({
      metadata: { name },
      spec: { containers: [{ name: 'main', image: 'busybox', command: ['sleep', '3600'] }] },
    });
    const pod = await waitForPod(core, name, 'Running', (p) => p.status?.phase === 'Running');
    const id = containerID(pod).replace('containerd://', '');
    const pids = await pidsOfContainer(id);
    expect(pids.length).toBe(1);
    expect(readFileSync(`/proc/${pids[0]}/cmdline`, 'utf8').split('\0')).toEqual(['sleep', '3600', '']);
    const cgroup = `${cluster.instance}/pod${pod.metadata!.uid}/${id}`;
    expect(readFileSync(`/proc/${pids[0]}/cgroup`, 'utf8')).toMatch(new RegExp(`^0::/.*${cgroup}$`, 'm'));
    // The process is in the pod's network namespace, not the host's
    expect(readFileSync(`/proc/${pids[0]}/net/fib_trie`, 'utf8')).toContain(pod.status!.podIP!);
  });

  it('restarts a container that exits (restartPolicy Always) and keeps the previous attempt’s log', async () => {
    const name = podName('crash');
    await createPod({
      metadata: { name },
      spec: { containers: [{ name: 'main', image: 'busybox', command: ['sh', '-c', 'echo attempt; exit 3'] }] },
    });
    const pod = await waitForPod(
      core,
      name,
      'two restarts',
      (p) => (p.status?.containerStatuses?.[0]?.restartCount ?? 0) >= 2,
    );
    const cs = pod.status!.containerStatuses![0];
    expect(cs.lastState?.terminated).toMatchObject({ exitCode: 3, reason: 'Error' });
    expect(pod.status!.phase).toBe('Running');
    const previous = await readAll(
      await runtime.logs({ namespace: 'default', pod: name, previous: true, follow: false }),
    );
    expect(previous).toBe('attempt\n');
    const timestamps = await readAll(
      await runtime.logs({ namespace: 'default', pod: name, previous: true, follow: false, timestamps: true }),
    );
    expect(timestamps).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z attempt\n$/);
  });

  it('serves tailLines of a log, and follows appended lines', async () => {
    const name = podName('logs');
    const flag = '/tmp/go';
    await createPod({
      metadata: { name },
      spec: {
        containers: [
          {
            name: 'main',
            image: 'busybox',
            command: [
              'sh',
              '-c',
              `for i in 1 2 3 4 5; do echo line$i; done; while [ ! -f ${flag} ]; do sleep 0.05; done; echo late; ` +
                `sleep 3600`,
            ],
          },
        ],
      },
    });
    await waitForPod(core, name, 'Running', (p) => p.status?.phase === 'Running');
    await waitFor('five lines', async () =>
      (await readAll(await runtime.logs({ namespace: 'default', pod: name, follow: false }))).includes('line5'),
    );
    expect(await readAll(await runtime.logs({ namespace: 'default', pod: name, follow: false, tailLines: 2 }))).toBe(
      'line4\nline5\n',
    );
    const follower = await runtime.logs({ namespace: 'default', pod: name, follow: true, tailLines: 1 });
    let seen = '';
    follower.on('data', (c: Buffer) => (seen += c.toString()));
    await waitFor('the tail line', () => seen === 'line5\n');
    await execOutput(
      await runtime.exec({ namespace: 'default', pod: name, command: ['touch', flag], stdin: false, tty: false }),
    );
    await waitFor('followed line', () => seen.includes('late\n'));
    follower.destroy();
    expect(seen).toBe('line5\nlate\n');
  });

  it('ends a pod Succeeded (OnFailure, exit 0) or Failed (Never, exit 7) with terminated states', async () => {
    const ok = podName('ok');
    const bad = podName('bad');
    await createPod({
      metadata: { name: ok },
      spec: {
        restartPolicy: 'OnFailure',
        containers: [{ name: 'main', image: 'busybox', command: ['sh', '-c', 'exit 0'] }],
      },
    });
    await createPod({
      metadata: { name: bad },
      spec: {
        restartPolicy: 'Never',
        containers: [{ name: 'main', image: 'busybox', command: ['sh', '-c', 'exit 7'] }],
      },
    });
    const done = await waitForPod(core, ok, 'Succeeded', (p) => p.status?.phase === 'Succeeded');
    const failed = await waitForPod(core, bad, 'Failed', (p) => p.status?.phase === 'Failed');
    expect(done.status!.containerStatuses![0].state!.terminated).toMatchObject({ exitCode: 0, reason: 'Completed' });
    expect(failed.status!.containerStatuses![0].state!.terminated).toMatchObject({ exitCode: 7, reason: 'Error' });
    expect(failed.status!.containerStatuses![0].restartCount).toBe(0);
    expect(failed.status!.conditions!.find((c) => c.type === 'Ready')).toMatchObject({
      status: 'False',
      reason: 'PodCompleted',
    });
  });

  it('runs init containers first, in order', async () => {
    const name = podName('init');
    // The containers share a hostPath volume: the host reads the order they wrote in.
    const marker = join(scratch, name);
    const out = { name: 'out', mountPath: '/out' };
    const write = (what: string) => `echo ${what} >> /out/${name}`;
    await createPod({
      metadata: { name },
      spec: {
        volumes: [{ name: 'out', hostPath: { path: scratch } }],
        initContainers: [
          { name: 'one', image: 'busybox', command: ['sh', '-c', write('one')], volumeMounts: [out] },
          { name: 'two', image: 'busybox', command: ['sh', '-c', write('two')], volumeMounts: [out] },
        ],
        containers: [
          {
            name: 'main',
            image: 'busybox',
            command: ['sh', '-c', `${write('main')}; sleep 3600`],
            volumeMounts: [out],
          },
        ],
      },
    });
    const pod = await waitForPod(core, name, 'Running', (p) => p.status?.phase === 'Running' && isReady(p));
    await waitFor('main wrote', () => existsSync(marker) && readFileSync(marker, 'utf8').includes('main'));
    expect(readFileSync(marker, 'utf8')).toBe('one\ntwo\nmain\n');
    expect(pod.status!.initContainerStatuses!.map((s) => s.state?.terminated?.reason)).toEqual([
      'Completed',
      'Completed',
    ]);
  });

  it('follows the readiness probe: not Ready until it passes, Ready after', async () => {
    const name = podName('ready');
    const flag = '/tmp/ready';
    await createPod({
      metadata: { name },
      spec: {
        containers: [
          {
            name: 'main',
            image: 'busybox',
            command: ['sleep', '3600'],
            readinessProbe: { exec: { command: ['test', '-f', flag] }, periodSeconds: 1 },
          },
        ],
      },
    });
    const running = await waitForPod(core, name, 'Running', (p) => p.status?.phase === 'Running');
    await new Promise((r) => setTimeout(r, 500));
    const notYet = await core.readNamespacedPod({ namespace: 'default', name });
    expect(isReady(notYet)).toBe(false);
    expect(notYet.status!.conditions!.find((c) => c.type === 'ContainersReady')).toMatchObject({
      status: 'False',
      reason: 'ContainersNotReady',
    });
    expect(running.status!.containerStatuses![0].ready).toBe(false);
    await execOutput(
      await runtime.exec({ namespace: 'default', pod: name, command: ['touch', flag], stdin: false, tty: false }),
    );
    const ready = await waitForPod(core, name, 'Ready', isReady);
    expect(ready.status!.containerStatuses![0].ready).toBe(true);
  });

  it('restarts a container whose liveness probe fails (SIGTERM, then a new attempt)', async () => {
    const name = podName('live');
    await createPod({
      metadata: { name },
      spec: {
        terminationGracePeriodSeconds: 2,
        containers: [
          {
            name: 'app',
            image: 'devop.test/http-echo',
            livenessProbe: { httpGet: { path: '/healthz', port: 8081 }, periodSeconds: 1, failureThreshold: 2 },
          },
        ],
      },
    });
    const pod = await waitForPod(
      core,
      name,
      'a liveness restart',
      (p) => (p.status?.containerStatuses?.[0]?.restartCount ?? 0) >= 1,
    );
    expect(pod.status!.containerStatuses![0].lastState?.terminated).toBeTruthy();
    const previous = await readAll(
      await runtime.logs({ namespace: 'default', pod: name, previous: true, follow: false }),
    );
    expect(previous).toContain(`http-echo ${name} got SIGTERM`);
    const events = await core
      .listNamespacedEvent({ namespace: 'default', fieldSelector: `involvedObject.name=${name}` })
      .catch(() => core.listNamespacedEvent({ namespace: 'default' }));
    expect(events.items.filter((e) => e.involvedObject.name === name).map((e) => e.reason)).toEqual(
      expect.arrayContaining(['Unhealthy', 'Killing', 'Started']),
    );
  });

  // Upstream: kubernetes pkg/kubelet/images/image_manager.go (EnsureImageExists: pull policy, Pulling / Failed /
  // BackOff and their messages, the per-image back-off), pkg/kubelet/events/event.go (the reasons),
  // pkg/kubelet/kuberuntime/kuberuntime_container.go (startContainer: the "Error: <reason>" event).
  it('ends an image no registry serves in ErrImagePull, then ImagePullBackOff, with the kubelet’s events', async () => {
    // Given a pod whose image the node does not have
    const name = podName('noimg');
    const image = `example.com/no-such-image-${name}:1.0`;
    await createPod({
      metadata: { name },
      spec: { containers: [{ name: 'main', image, command: ['sleep', '3600'] }] },
    });
    // When the kubelet tries to pull it, fails, and tries again within the back-off
    const pod = await waitForPod(core, name, 'pull error', (p) =>
      ['ErrImagePull', 'ImagePullBackOff'].includes(p.status?.containerStatuses?.[0]?.state?.waiting?.reason ?? ''),
    );
    const waiting = pod.status!.containerStatuses![0].state!.waiting!;
    expect(waiting.message).toContain(`failed to pull and unpack image "${image}"`);
    expect(waiting.message).toContain('npm run cluster:load');
    expect(pod.status!.phase).toBe('Pending');
    const backOff = await waitForPod(
      core,
      name,
      'ImagePullBackOff',
      (p) => p.status?.containerStatuses?.[0]?.state?.waiting?.reason === 'ImagePullBackOff',
    );
    // Then the container waits as on a node, and the pod's events are the kubelet's
    expect(backOff.status!.containerStatuses![0].state!.waiting!.message).toBe(`Back-off pulling image "${image}"`);
    const events = await waitFor(
      'the back-off events',
      async () => {
        const list = await core.listNamespacedEvent({
          namespace: 'default',
          fieldSelector: `involvedObject.name=${name}`,
        });
        const seen = list.items.map((e) => `${e.type} ${e.reason} ${e.message}`);
        return seen.some((e) => e.startsWith('Warning Failed Error: ImagePullBackOff')) ? seen : undefined;
      },
      15_000,
    );
    expect(events).toEqual(
      expect.arrayContaining([
        `Normal Pulling Pulling image "${image}"`,
        expect.stringMatching(
          new RegExp(`^Warning Failed Failed to pull image "${image}": rpc error: code = NotFound`),
        ),
        'Warning Failed Error: ErrImagePull',
        `Normal BackOff Back-off pulling image "${image}"`,
        'Warning Failed Error: ImagePullBackOff',
      ]),
    );
    // And the repeated BackOff is one Event whose count grows (client-go tools/record/events_cache.go eventLogger)
    const repeated = await waitFor(
      'a BackOff event counted three times',
      async () => {
        const list = await core.listNamespacedEvent({
          namespace: 'default',
          fieldSelector: `involvedObject.name=${name}`,
        });
        const backOffs = list.items.filter((e) => e.reason === 'BackOff');
        return backOffs.length === 1 && (backOffs[0].count ?? 0) >= 3 ? backOffs[0] : undefined;
      },
      15_000,
    );
    expect(new Date(repeated.lastTimestamp!).getTime()).toBeGreaterThan(new Date(repeated.firstTimestamp!).getTime());
    // And once containerd has the image (here: busybox under that name), the next pull starts it
    await tagImage('busybox', image);
    try {
      await waitForPod(core, name, 'Running', (p) => p.status?.phase === 'Running', 60_000);
    } finally {
      await removeImage(image);
    }
  });

  it('does not pull under imagePullPolicy Never: ErrImageNeverPull', async () => {
    // Given a pod with imagePullPolicy Never and an image the node does not have
    const name = podName('never');
    const image = `example.com/no-such-image-${name}:1.0`;
    await createPod({
      metadata: { name },
      spec: { containers: [{ name: 'main', image, imagePullPolicy: 'Never', command: ['sleep', '3600'] }] },
    });
    // When the kubelet starts it, then the container waits in ErrImageNeverPull with the kubelet's message
    const pod = await waitForPod(
      core,
      name,
      'ErrImageNeverPull',
      (p) => p.status?.containerStatuses?.[0]?.state?.waiting?.reason === 'ErrImageNeverPull',
    );
    expect(pod.status!.containerStatuses![0].state!.waiting!.message).toBe(
      `Container image "${image}" is not present with pull policy of Never`,
    );
  });

  it('execs a command in the container’s netns with its env', async () => {
    const name = podName('exec');
    await createPod({
      metadata: { name },
      spec: {
        containers: [
          { name: 'main', image: 'busybox', command: ['sleep', '3600'], env: [{ name: 'COLOR', value: 'teal' }] },
        ],
      },
    });
    const pod = await waitForPod(core, name, 'Running', (p) => p.status?.phase === 'Running');
    const proc = await runtime.exec({
      namespace: 'default',
      pod: name,
      command: ['sh', '-c', 'echo $COLOR; cat /etc/resolv.conf; ip -4 -o addr show eth0; exit 4'],
      stdin: false,
      tty: false,
    });
    const out = await execOutput(proc);
    expect(out.exitCode).toBe(4);
    expect(out.stdout).toContain('teal\n');
    expect(out.stdout).toContain('search default.svc.cluster.local svc.cluster.local cluster.local');
    expect(out.stdout).toContain(`nameserver ${cluster.nodeIP}`);
    expect(out.stdout).toContain(`${pod.status!.podIP}/24`);
    // stdin reaches the command
    const cat = await runtime.exec({ namespace: 'default', pod: name, command: ['cat'], stdin: true, tty: false });
    cat.stdin!.end('through stdin');
    expect((await execOutput(cat)).stdout).toBe('through stdin');
    // A short command's output arrives whole every time (ctr's FIFO copy lost it a few times in a hundred)
    for (let i = 0; i < 20; i++) {
      const short = await runtime.exec({
        namespace: 'default',
        pod: name,
        command: ['echo', `${i}`],
        stdin: false,
        tty: false,
      });
      expect(await execOutput(short)).toEqual({ stdout: `${i}\n`, stderr: '', exitCode: 0 });
    }
    // Killing an exec ends the command in the container (it is not the kubelet's child), and nothing else of the pod
    const [before] = await pidsOfContainer(containerID(pod));
    const sleeper = await runtime.exec({
      namespace: 'default',
      pod: name,
      command: ['sh', '-c', 'echo up; exec sleep 777'],
      stdin: false,
      tty: false,
    });
    await new Promise<void>((resolve) => sleeper.stdout.once('data', () => resolve()));
    const during = await pidsOfContainer(containerID(pod));
    expect(during.length).toBe(2);
    sleeper.kill();
    expect((await execOutput(sleeper)).exitCode).toBe(137);
    await waitFor('the exec’d sleep gone', async () => (await pidsOfContainer(containerID(pod))).length === 1, 5_000);
    expect(await pidsOfContainer(containerID(pod))).toEqual([before]);
  });

  it('runs an ephemeral container in the target pod’s netns', async () => {
    const name = podName('eph');
    await createPod({
      metadata: { name },
      spec: {
        containers: [
          { name: 'app', image: 'devop.test/http-echo', env: [{ name: 'LISTEN_HOST', value: '127.0.0.1' }] },
        ],
      },
    });
    await waitForPod(core, name, 'Running', (p) => p.status?.phase === 'Running');
    const current = await core.readNamespacedPod({ namespace: 'default', name });
    const script =
      "fetch('http://127.0.0.1:8080/from-debug').then((r) => r.json()).then((j) => console.log('reached', j.pod, " +
      'j.path))';
    await core.replaceNamespacedPodEphemeralcontainers({
      namespace: 'default',
      name,
      body: {
        ...current,
        spec: {
          ...current.spec!,
          ephemeralContainers: [
            {
              name: 'debugger',
              image: 'devop.test/shell',
              command: ['sh', '-c', `sleep 0.3; ${NODE} -e "${script}"; sleep 3600`],
              targetContainerName: 'app',
            },
          ],
        },
      },
    });
    const pod = await waitForPod(core, name, 'ephemeral running', (p) =>
      Boolean(p.status?.ephemeralContainerStatuses?.[0]?.state?.running),
    );
    expect(pod.status!.ephemeralContainerStatuses![0].containerID).toMatch(/^containerd:\/\/[0-9a-f]{64}$/);
    const log = await waitFor('debugger output', async () => {
      const text = await readAll(
        await runtime.logs({ namespace: 'default', pod: name, container: 'debugger', follow: false }),
      );
      return text.includes('reached') ? text : undefined;
    });
    expect(log).toContain(`reached ${name} /from-debug`);
  });

  it(
    'mounts the service-account token (the API answers it from the pod) and configMap volumes in the container ' +
      'only',
    async () => {
      await core.createNamespacedConfigMap({
        namespace: 'default',
        body: { metadata: { name: 'vol-config' }, data: { 'app.conf': 'mode=fast\n' } },
      });
      const name = podName('vol');
      const mountDir = '/etc/app';
      await createPod({
        metadata: { name },
        spec: {
          volumes: [{ name: 'cfg', configMap: { name: 'vol-config' } }],
          containers: [
            {
              name: 'main',
              image: 'busybox',
              command: ['sleep', '3600'],
              volumeMounts: [
                { name: 'cfg', mountPath: mountDir, readOnly: true },
                { name: 'cfg', mountPath: '/run/app/settings.conf', subPath: 'app.conf' },
              ],
            },
          ],
        },
      });
      await waitForPod(core, name, 'Running', (p) => p.status?.phase === 'Running');
      const sa = '/var/run/secrets/kubernetes.io/serviceaccount';
      const exec = async (command: string[]) =>
        execOutput(await runtime.exec({ namespace: 'default', pod: name, command, stdin: false, tty: false }));
      expect((await exec(['cat', `${mountDir}/app.conf`])).stdout).toBe('mode=fast\n');
      expect((await exec(['cat', '/run/app/settings.conf'])).stdout).toBe('mode=fast\n');
      expect((await exec(['sh', '-c', `echo x > ${mountDir}/new`])).exitCode).not.toBe(0);
      expect((await exec(['cat', `${sa}/namespace`])).stdout).toBe('default');
      expect((await exec(['cat', `${sa}/ca.crt`])).stdout).toContain('-----BEGIN CERTIFICATE-----');
      // The host does not see the container's mounts
      expect(existsSync(sa)).toBe(false);
      // The token and CA let the pod call the API server through the kubernetes Service, verifying its certificate
      const script = [
        "const fs = require('fs');",
        `const dir = '${sa}';`,
        'const { KUBERNETES_SERVICE_HOST: host, KUBERNETES_SERVICE_PORT: port, HOSTNAME: pod } = process.env;',
        'fetch(`https://${host}:${port}/api/v1/namespaces/default/pods/${pod}`,',
        "  { headers: { authorization: 'Bearer ' + fs.readFileSync(dir + '/token', 'utf8') } })",
        '  .then((r) => r.json())',
        "  .then((p) => console.log(p.metadata.name), (e) => console.log('error', e.cause?.code ?? e.message));",
      ].join('\n');
      const api = await exec(['env', `NODE_EXTRA_CA_CERTS=${sa}/ca.crt`, NODE, '-e', script]);
      expect(api.stdout.trim()).toBe(name);
    },
  );

  it('deletes a pod: SIGTERM to the container, netns removed, then the pod object', async () => {
    const name = podName('del');
    await createPod({
      metadata: { name },
      spec: { terminationGracePeriodSeconds: 5, containers: [{ name: 'app', image: 'devop.test/http-echo' }] },
    });
    const pod = await waitForPod(core, name, 'Running', (p) => p.status?.phase === 'Running');
    // Running means the process was started, not that it has set up its SIGTERM handler: a SIGTERM that arrives while
    // Node is still booting (seconds on a loaded machine) kills it by the default action, silently, as on a real node.
    // http-echo logs "listening" after it has installed its handlers.
    await waitFor('http-echo listening', async () =>
      (await readAll(await runtime.logs({ namespace: 'default', pod: name, follow: false }))).includes(
        `http-echo ${name} listening on 8080`,
      ),
    );
    const id = containerID(pod).replace('containerd://', '');
    const pids = await pidsOfContainer(id);
    expect(pids.length).toBe(1);
    // Follow the log while deleting: it ends when the container does
    const follower = readAll(await runtime.logs({ namespace: 'default', pod: name, follow: true }));
    await core.deleteNamespacedPod({ namespace: 'default', name });
    await waitFor('pod object gone', async () => {
      try {
        await core.readNamespacedPod({ namespace: 'default', name });
        return false;
      } catch (err) {
        return (err as { code?: number }).code === 404;
      }
    });
    const followed = await follower;
    expect(followed).toContain(`http-echo ${name} listening on 8080`);
    expect(followed).toContain(`http-echo ${name} got SIGTERM`);
    expect(existsSync(`/proc/${pids[0]}`)).toBe(false);
    expect(await pidsOfContainer(id)).toEqual([]);
    const podCgroup = `/sys/fs/cgroup/unified/devop-standin/${cluster.instance}/pod${pod.metadata!.uid}`;
    expect(existsSync(`${podCgroup}/${id}`)).toBe(false);
    expect(existsSync(podCgroup)).toBe(false);
    await expect(fetch(`http://${pod.status!.podIP}:8080/`, { signal: AbortSignal.timeout(2000) })).rejects.toThrow();
  });
});
