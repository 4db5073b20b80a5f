// A container's log on the stand-in node is written as containerd's CRI plugin writes it (internal/cri/io/logger.go
// redirectLogs): a line over 16 KiB cut into P entries of 16 KiB that `kubectl logs` joins again, a last line without a
// newline kept as P, real nanoseconds in RFC3339Nano, and nothing lost when a container writes and exits at once.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CoreV1Api, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import type { ClusterHandle, NodeRuntime } from '../../standin/index.js';
import { readAll, waitForPod } from '../../testkit/pods.js';
import { requireRoot } from '../../testkit/root.js';
import { withStandinNode } from '../../testkit/standin-node.js';

requireRoot('stand-in kubelet: container logs');

/** containerd's CRI plugin's max_container_log_line_size default: a longer line is split into P entries. */
const MAX_LINE = 16 * 1024;

let cluster: ClusterHandle;
let core: CoreV1Api;
let runtime: NodeRuntime;

withStandinNode((node) => {
  ({ cluster, core, runtime } = node);
});

function podName(prefix: string): string {
  return `${prefix}-${randomBytes(3).toString('hex')}`;
}

/** The CRI log file of a container's first attempt, where the stand-in keeps it (as /var/log/pods does). */
function logFile(pod: V1Pod, container: string): string {
  const dir = `default_${pod.metadata!.name}_${pod.metadata!.uid}`;
  return join('/run/devop-kubelet', cluster.instance, 'logs', dir, container, '0.log');
}

async function finishedPod(name: string, containers: V1Pod['spec']): Promise<V1Pod> {
  await core.createNamespacedPod({ namespace: 'default', body: { metadata: { name }, spec: containers } });
  return waitForPod(core, name, 'Succeeded', (p) => p.status?.phase === 'Succeeded');
}

describe('stand-in container logs', () => {
  it('cuts a line over 16 KiB into P entries that kubectl logs joins, and keeps a last line without newline as P', async () => {
    // Given a container that writes a 40,000-byte line (in several writes), a CRLF line, then "tail" with no newline
    const name = podName('long');
    const script =
      "head -c 40000 /dev/zero | tr '\\0' a; printf '\\n'; printf 'crlf\\r\\n'; printf 'mid\\rdle\\n'; printf tail";
    const pod = await finishedPod(name, {
      restartPolicy: 'Never',
      containers: [{ name: 'main', image: 'busybox', command: ['sh', '-c', script] }],
    });
    // Then the file holds what containerd's CRI logger writes: P, P, F for the long line, "\r\n" ends a line as "\n"
    // does, a lone "\r" is text, and the last line is P
    const entries = readFileSync(logFile(pod, 'main'), 'utf8').split('\n').slice(0, -1);
    const parsed = entries.map((e) => /^(\S+) (stdout|stderr) ([FP]) (.*)$/s.exec(e)!);
    expect(parsed.map((m) => [m[2], m[3], m[4].length])).toEqual([
      ['stdout', 'P', MAX_LINE],
      ['stdout', 'P', MAX_LINE],
      ['stdout', 'F', 40_000 - 2 * MAX_LINE],
      ['stdout', 'F', 'crlf'.length],
      ['stdout', 'F', 'mid\rdle'.length],
      ['stdout', 'P', 'tail'.length],
    ]);
    expect(parsed.slice(3).map((m) => m[4])).toEqual(['crlf', 'mid\rdle', 'tail']);
    // Go's RFC3339Nano: nanoseconds, trailing zeros dropped (not milliseconds padded with zeros)
    for (const m of parsed) expect(m[1]).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d*[1-9])?Z$/);
    expect(parsed.some((m) => !/\.\d{3}0{6}Z$/.test(m[1]))).toBe(true);
    // And kubectl logs shows the line whole, and the last line without a newline
    const shown = await readAll(await runtime.logs({ namespace: 'default', pod: name, follow: false }));
    expect(shown.length).toBe(40_000 + '\ncrlf\nmid\rdle\ntail'.length);
    expect(shown.slice(0, 40_000) === 'a'.repeat(40_000)).toBe(true);
    expect(shown.slice(40_000)).toBe('\ncrlf\nmid\rdle\ntail');
    const stamped = await readAll(
      await runtime.logs({ namespace: 'default', pod: name, follow: false, timestamps: true, tailLines: 1 }),
    );
    expect(stamped).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z tail$/);
  });

  it('loses no line of containers that write and exit at once', async () => {
    // Given a pod of twelve init containers and one container, each writing two lines to stdout and one to stderr,
    // the last without a newline, and exiting right after
    const count = 12;
    const say = (n: string) => ['sh', '-c', `echo ${n}-out; echo ${n}-err >&2; printf ${n}-end`];
    const name = podName('burst');
    const pod = await finishedPod(name, {
      restartPolicy: 'Never',
      initContainers: Array.from({ length: count }, (_, i) => ({
        name: `init${i}`,
        image: 'busybox',
        command: say(`i${i}`),
      })),
      containers: [{ name: 'main', image: 'busybox', command: say('main') }],
    });
    // Then every container's log holds its three lines, the one without a newline as P
    for (const container of [...Array.from({ length: count }, (_, i) => `init${i}`), 'main']) {
      const n = container === 'main' ? 'main' : `i${container.slice(4)}`;
      const entries = readFileSync(logFile(pod, container), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((e) => e.split(' ').slice(1).join(' '))
        .sort();
      expect(entries, container).toEqual([`stderr F ${n}-err`, `stdout F ${n}-out`, `stdout P ${n}-end`]);
      const shown = await readAll(await runtime.logs({ namespace: 'default', pod: name, container, follow: false }));
      for (const line of [`${n}-out\n`, `${n}-err\n`, `${n}-end`]) expect(shown, container).toContain(line);
    }
  });
});
