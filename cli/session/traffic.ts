// Maps the agent's traffic messages to the reporter's connection / request / response events.
import type { TrafficEvent } from '../../shared/protocol.js';
import type { ReportEvent } from '../reporter.js';

/**
 * The reporter's id of a connection or request. Each agent counts its own (`<port>-<n>`), so with every pod of a
 * workload (--all-pods) two pods' requests would share an id and a response be paired with the other pod's request:
 * the pod goes before the agent's id.
 */
export function eventId(agentId: string, pod: string | undefined): string {
  return pod ? `${pod}/${agentId}` : agentId;
}

export function trafficToEvent(event: TrafficEvent, pod: string | undefined): ReportEvent | undefined {
  switch (event.kind) {
    case 'connection':
      return {
        type: 'connection',
        id: eventId(event.connId, pod),
        port: event.port,
        remote: `${event.remoteAddress}:${event.remotePort}`,
        to: event.to,
        ...(pod ? { pod } : {}),
        state: event.phase === 'open' ? 'open' : 'closed',
        ...(event.bytesIn !== undefined ? { bytesIn: event.bytesIn } : {}),
        ...(event.bytesOut !== undefined ? { bytesOut: event.bytesOut } : {}),
        ...(event.fallbackMs !== undefined ? { fallbackMs: event.fallbackMs } : {}),
      };
    case 'request':
      return {
        type: 'request',
        id: eventId(event.requestId, pod),
        port: event.port,
        method: event.method,
        path: event.path,
        to: event.to,
        ...(pod ? { pod } : {}),
        ...(event.grpc ? { grpc: event.grpc } : {}),
        ...(event.note ? { note: event.note } : {}),
        ...(event.mirror ? { mirror: true } : {}),
      };
    case 'response':
      return {
        type: 'response',
        id: eventId(event.requestId, pod),
        status: event.status,
        ms: event.durationMs,
        bytes: event.bytes,
        ...(event.grpcStatus !== undefined ? { grpcStatus: event.grpcStatus } : {}),
        ...(event.grpcMessage !== undefined ? { grpcMessage: event.grpcMessage } : {}),
      };
    default:
      return undefined;
  }
}
