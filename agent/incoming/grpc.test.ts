// What the traffic view learns of a gRPC call from its HTTP/2 headers: service and method, status and message.
import { describe, expect, it } from 'vitest';
import { grpcCall, grpcStatusOf } from './grpc.js';

describe('gRPC calls in the traffic view', () => {
  it('names a call by its path only when the content-type says gRPC', () => {
    // Given a gRPC request, one with a JSON codec, and a plain HTTP/2 request on the same kind of path
    const path = '/shop.v1.Orders/GetOrder';
    // Then the gRPC ones are calls of service shop.v1.Orders, method GetOrder, and the plain one is none
    expect(grpcCall({ ':path': path, 'content-type': 'application/grpc' })).toEqual({
      service: 'shop.v1.Orders',
      method: 'GetOrder',
    });
    expect(grpcCall({ ':path': path, 'content-type': 'application/grpc+json' })?.method).toBe('GetOrder');
    expect(grpcCall({ ':path': path, 'content-type': 'application/json' })).toBeUndefined();
  });

  it('reads grpc-status and the percent-encoded grpc-message; headers without a status carry none', () => {
    // Given trailers of a failed call, and the response headers that came before them
    const trailers = { 'grpc-status': '7', 'grpc-message': 'not%20yours%3A%20order%201' };
    // Then the status and the decoded message are read from the trailers, nothing from the headers
    expect(grpcStatusOf(trailers)).toEqual({ grpcStatus: 7, grpcMessage: 'not yours: order 1' });
    expect(grpcStatusOf({ 'content-type': 'application/grpc' })).toBeUndefined();
    // And a message that is not valid percent-encoding is shown as it came
    expect(grpcStatusOf({ 'grpc-status': '13', 'grpc-message': '100%' })).toEqual({
      grpcStatus: 13,
      grpcMessage: '100%',
    });
  });
});
