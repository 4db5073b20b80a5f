// A stand-in node whose "pods" are this machine, for the suites that test the API server's stream protocols apart from
// the kubelet's namespaces: a pod's port reaches the local port `portOf` names, or is refused as a closed port is.
import { connect } from 'node:net';
import { Readable } from 'node:stream';
import type { NodeRuntime } from './node-runtime.js';

export function localRuntime(
  portOf: (port: number, namespace: string, pod: string) => number | undefined,
  overrides: Partial<Pick<NodeRuntime, 'exec' | 'logs'>> = {},
): NodeRuntime {
  return {
    nodeName: 'standin-node',
    nodeIP: '127.0.0.1',
    podCIDR: '10.0.0.0/24',
    async dialPod(namespace, pod, port) {
      const target = portOf(port, namespace, pod);
      if (target === undefined) throw new Error(`connect ECONNREFUSED 127.0.0.1:${port}`);
      const s = connect(target, '127.0.0.1');
      await new Promise((r, j) => s.once('connect', r).once('error', j));
      return s;
    },
    async exec() {
      throw new Error('no exec here');
    },
    async logs() {
      return Readable.from([]);
    },
    async stop() {
      // Nothing runs behind this runtime's "pods".
    },
    ...overrides,
  };
}
