// What the traffic view says about a gRPC call on a filtered HTTP/2 port: its service and method (from the request's
// path and content-type) and its status (grpc-status and grpc-message, in the trailers or a trailers-only answer).
import type { IncomingHttpHeaders } from 'node:http2';

/** gRPC (grpc/doc/PROTOCOL-HTTP2.md): content-type application/grpc (or +proto, +json, …), path /Service/Method. */
export function grpcCall(headers: IncomingHttpHeaders): { service: string; method: string } | undefined {
  if (!String(headers['content-type'] ?? '').startsWith('application/grpc')) return undefined;
  const m = /^\/([^/]+)\/([^/?]+)$/.exec(String(headers[':path'] ?? ''));
  return m ? { service: m[1], method: m[2] } : undefined;
}

/** The call's status when these headers carry it (the trailers, or a trailers-only answer's one HEADERS frame). */
export function grpcStatusOf(headers: IncomingHttpHeaders): { grpcStatus: number; grpcMessage?: string } | undefined {
  const status = headers['grpc-status'];
  if (status === undefined || !/^\d+$/.test(String(status))) return undefined;
  const message = headers['grpc-message'];
  // grpc-message is percent-encoded on the wire (PROTOCOL-HTTP2.md "Responses").
  let grpcMessage: string | undefined;
  if (message !== undefined) {
    try {
      grpcMessage = decodeURIComponent(String(message));
    } catch {
      grpcMessage = String(message); // not valid percent-encoding: shown as it came
    }
  }
  return { grpcStatus: Number(status), ...(grpcMessage ? { grpcMessage } : {}) };
}
