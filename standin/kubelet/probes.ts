// Readiness and liveness probes as kubelet runs them: httpGet (HTTP or HTTPS, unverified) and tcpSocket from the node's
// IP (so an agent can tell them apart), exec inside the container; success/failure thresholds decide the container's
// ready flag.
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { connect } from 'node:net';
import type { V1Container, V1Probe } from '@kubernetes/client-node';

export interface ProbeTarget {
  podIP: string;
  nodeIP: string;
  container: V1Container;
  /** Runs a command in the container; resolves to its exit code. */
  exec(command: string[], timeoutMs: number): Promise<number>;
}

function resolvePort(port: number | string | undefined, container: V1Container): number {
  if (typeof port === 'number') return port;
  if (port !== undefined && /^\d+$/.test(port)) return Number(port);
  const named = container.ports?.find((p) => p.name === port);
  if (!named) throw new Error(`port "${port}" is not a named port of container ${container.name}`);
  return named.containerPort;
}

function httpProbe(probe: V1Probe, target: ProbeTarget, timeoutMs: number): Promise<boolean> {
  const get = probe.httpGet!;
  return new Promise((resolve) => {
    const headers: Record<string, string> = { 'user-agent': 'kube-probe/1.33', accept: '*/*' };
    for (const h of get.httpHeaders ?? []) headers[h.name] = h.value;
    // HTTPS probes do not verify the certificate, as kubelet's do not.
    const request = get.scheme === 'HTTPS' ? httpsRequest : httpRequest;
    const req = request(
      {
        ...(get.scheme === 'HTTPS' ? { rejectUnauthorized: false } : {}),
        host: get.host || target.podIP,
        port: resolvePort(get.port, target.container),
        path: get.path || '/',
        method: 'GET',
        headers,
        localAddress: target.nodeIP,
        timeout: timeoutMs,
        agent: false,
      },
      (res) => {
        res.resume();
        const code = res.statusCode ?? 0;
        resolve(code >= 200 && code < 400);
      },
    );
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(false));
    req.end();
  });
}

function tcpProbe(probe: V1Probe, target: ProbeTarget, timeoutMs: number): Promise<boolean> {
  const tcp = probe.tcpSocket!;
  return new Promise((resolve) => {
    const socket = connect({
      host: tcp.host || target.podIP,
      port: resolvePort(tcp.port, target.container),
      localAddress: target.nodeIP,
    });
    const timer = setTimeout(() => socket.destroy(), timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => {
      clearTimeout(timer);
      resolve(false);
    });
    socket.once('close', () => resolve(false));
  });
}

/** Runs one probe attempt; resolves true on success. */
export async function runProbe(probe: V1Probe, target: ProbeTarget): Promise<boolean> {
  const timeoutMs = (probe.timeoutSeconds ?? 1) * 1000;
  try {
    if (probe.httpGet) return await httpProbe(probe, target, timeoutMs);
    if (probe.tcpSocket) return await tcpProbe(probe, target, timeoutMs);
    if (probe.exec?.command) return (await target.exec(probe.exec.command, timeoutMs)) === 0;
  } catch {
    return false;
  }
  return false;
}

/** Until a container is first ready, probe at most this far apart: tests wait for readiness, not for periodSeconds. */
export const UNREADY_PROBE_INTERVAL_MS = 200;

/** Probes a container until stopped; calls onChange with the new ready flag when the thresholds say so. */
export function startReadinessLoop(
  probe: V1Probe,
  target: ProbeTarget,
  onChange: (ready: boolean) => void,
): () => void {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let ready = false;
  let everReady = false;
  let successes = 0;
  let failures = 0;
  const successThreshold = probe.successThreshold ?? 1;
  const failureThreshold = probe.failureThreshold ?? 3;
  const periodMs = (probe.periodSeconds ?? 10) * 1000;

  const tick = async () => {
    if (stopped) return;
    const ok = await runProbe(probe, target);
    if (stopped) return;
    if (ok) {
      successes++;
      failures = 0;
      if (!ready && successes >= successThreshold) {
        ready = true;
        everReady = true;
        onChange(true);
      }
    } else {
      failures++;
      successes = 0;
      if (ready && failures >= failureThreshold) {
        ready = false;
        onChange(false);
      }
    }
    const next = everReady ? periodMs : Math.min(periodMs, UNREADY_PROBE_INTERVAL_MS);
    timer = setTimeout(() => void tick(), next);
  };
  timer = setTimeout(() => void tick(), (probe.initialDelaySeconds ?? 0) * 1000);
  return () => {
    stopped = true;
    if (timer) clearTimeout(timer);
  };
}

/** Probes a container's liveness until stopped; calls onUnhealthy once failureThreshold probes in a row have failed. */
export function startLivenessLoop(probe: V1Probe, target: ProbeTarget, onUnhealthy: () => void): () => void {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let failures = 0;
  const failureThreshold = probe.failureThreshold ?? 3;
  const periodMs = (probe.periodSeconds ?? 10) * 1000;
  const tick = async () => {
    if (stopped) return;
    const ok = await runProbe(probe, target);
    if (stopped) return;
    failures = ok ? 0 : failures + 1;
    if (failures >= failureThreshold) {
      stopped = true;
      onUnhealthy();
      return;
    }
    timer = setTimeout(() => void tick(), periodMs);
  };
  timer = setTimeout(() => void tick(), (probe.initialDelaySeconds ?? 0) * 1000);
  return () => {
    stopped = true;
    if (timer) clearTimeout(timer);
  };
}
