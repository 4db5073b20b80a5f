// The seam between the stand-in's API server and its kubelet: what the API server asks of the node for
// pods/portforward, pods/exec and pods/log. The kubelet itself is an ordinary API client (list/watch pods, patch
// status).
import type { Duplex, Readable, Writable } from 'node:stream';

export interface ExecRequest {
  namespace: string;
  pod: string;
  container?: string;
  command: string[];
  stdin: boolean;
  tty: boolean;
}

export interface ExecProcess {
  stdin: Writable | null;
  stdout: Readable;
  stderr: Readable;
  resize(cols: number, rows: number): void;
  /** Resolves when the command ends. */
  wait(): Promise<{ exitCode: number; signal?: string }>;
  kill(): void;
}

export interface LogRequest {
  namespace: string;
  pod: string;
  container?: string;
  follow: boolean;
  tailLines?: number;
  previous?: boolean;
  timestamps?: boolean;
}

export interface NodeRuntime {
  nodeName: string;
  /** The node's address as pods see it (the bridge address on the host): kubelet probes come from here. */
  nodeIP: string;
  podCIDR: string;
  /** Connects to 127.0.0.1:port inside the pod's network namespace, as kubelet does for port-forward. */
  dialPod(namespace: string, pod: string, port: number): Promise<Duplex>;
  /** Runs a command in the container's network namespace with its env (pods/exec). */
  exec(req: ExecRequest): Promise<ExecProcess>;
  /** A container's log; with follow, it streams appended lines until the container ends or the reader is destroyed. */
  logs(req: LogRequest): Promise<Readable>;
  /** Kills every process and removes every netns, veth, bridge, cgroup and iptables rule that this node made. */
  stop(): Promise<void>;
}
