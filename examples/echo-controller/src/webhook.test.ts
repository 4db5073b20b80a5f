// The Echo validating webhook: the decision, and the HTTPS server as kube-apiserver calls it (TLS verified against
// the self-signed certificate as caBundle, with the Service's name).
import { request } from 'node:https';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { selfSignedCert } from '../../farm-operator/src/cert.js';
import { reviewEcho, startWebhookServer } from './webhook.js';
import { serviceNames } from './webhook-tls.js';
import type { Server } from 'node:https';

let server: Server | undefined;
afterEach(() => server?.close());

function post(port: number, ca: string, body: unknown): Promise<{ status: number; json: any }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path: '/validate?timeout=5s',
        method: 'POST',
        ca,
        servername: 'echo-controller-webhook.default.svc',
        headers: { 'content-type': 'application/json' },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, json: JSON.parse(Buffer.concat(chunks).toString()) }),
        );
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

describe('reviewEcho', () => {
  it('allows replicas up to the limit and refuses more, naming both', () => {
    expect(reviewEcho({ uid: 'a', object: { spec: { replicas: 3 } } }, 3)).toEqual({ uid: 'a', allowed: true });
    expect(reviewEcho({ uid: 'b', object: { spec: { replicas: 4 } } }, 3)).toEqual({
      uid: 'b',
      allowed: false,
      status: { code: 403, reason: 'Forbidden', message: 'spec.replicas: 4 is above the limit of 3' },
    });
    expect(reviewEcho({ uid: 'c', object: null }, 3).allowed).toBe(true);
  });
});

describe('startWebhookServer', () => {
  it('answers an AdmissionReview over TLS that verifies against its own certificate as caBundle', async () => {
    // Given the server with a certificate for the Service's names
    const tls = selfSignedCert({ commonName: 'echo', altNames: serviceNames('echo-controller-webhook', 'default') });
    const lines: string[] = [];
    server = await startWebhookServer({ port: 0, host: '127.0.0.1', tls, maxReplicas: 3, log: (l) => lines.push(l) });
    const port = (server.address() as AddressInfo).port;
    // When kube-apiserver posts a review of an Echo above the limit
    const review = {
      apiVersion: 'admission.k8s.io/v1',
      kind: 'AdmissionReview',
      request: {
        uid: 'u1',
        operation: 'CREATE',
        name: 'four',
        namespace: 'default',
        object: { spec: { replicas: 4 } },
      },
    };
    const res = await post(port, tls.cert, review);
    // Then it refuses with the uid echoed back, and logs the decision
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({
      apiVersion: 'admission.k8s.io/v1',
      kind: 'AdmissionReview',
      response: { uid: 'u1', allowed: false },
    });
    expect(lines).toContain('webhook: CREATE default/four: denied (spec.replicas: 4 is above the limit of 3)');
  });
});
