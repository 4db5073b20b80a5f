// Mirror: the client keeps getting the pod's answers unchanged while each mirroring session receives the same bytes;
// a session that does not read never slows the pod's traffic (its copy is dropped and it is told).
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { requireRoot } from '../helpers/root.js';
import { PodNet, waitFor, type AgentProc, type Proc } from './netns.js';
import { connectSession, type TestSession } from './session-client.js';
import { httpGet, keepAliveAgent } from './http.js';

const run = requireRoot('agent mirror');

describe.runIf(run)('agent: mirror', () => {
  const net = new PodNet();
  let pod: Proc;
  let agent: AgentProc;
  let control: string;
  let client: string;
  const sessions: TestSession[] = [];

  beforeAll(async () => {
    await net.setup();
    pod = await net.startPod({ port: 3000 });
    agent = await net.startAgent();
    control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    client = await net.relay(net.clientNs, net.podIP, 3000);
  });
  afterAll(async () => {
    for (const s of sessions) s.mux.close('test over');
    await net.teardown();
  });

  test('the client gets the pod\'s answers; two mirroring sessions each receive the same request bytes', async () => {
    // Given two sessions mirroring port 3000
    const one = await connectSession(control, { user: 'one' });
    const two = await connectSession(control, { user: 'two' });
    sessions.push(one, two);
    expect((await one.subscribe(3000, 'mirror')).type).toBe('subscribed');
    expect((await two.subscribe(3000, 'mirror')).type).toBe('subscribed');
    // When a keep-alive client sends two requests, one with a body
    const keep = keepAliveAgent();
    const a = await httpGet(client, '/m-1', { agent: keep });
    const b = await httpGet(client, '/m-2', { agent: keep, method: 'POST', body: 'mirror-body' });
    keep.destroy();
    // Then the pod answered both, unchanged
    expect(a.body).toBe('pod: GET /m-1');
    expect(b.body).toBe('pod: POST /m-2 body=mirror-body');
    await waitFor(() => net.podRequests(pod).length >= 2, 'the pod\'s request log'); // its log line may trail its answer
    expect(net.podRequests(pod).map((l) => l.split(' ')[2])).toEqual(['/m-1', '/m-2']);
    // And each session received the very bytes the client sent, as one mirrored connection
    for (const s of [one, two]) {
      await waitFor(() => Buffer.concat(s.incoming.flatMap((i) => i.data)).toString().includes('mirror-body'), 'the mirrored bytes');
      expect(s.incoming).toHaveLength(1);
      expect(s.incoming[0].open).toMatchObject({ kind: 'incoming', mode: 'mirror', port: 3000, remoteAddress: net.clientIP });
      const text = Buffer.concat(s.incoming[0].data).toString();
      expect(text).toMatch(/^GET \/m-1 HTTP\/1.1\r\n.*\r\n\r\nPOST \/m-2 HTTP\/1.1\r\n.*\r\n\r\nmirror-body$/s);
    }
  });

  test('a mirroring session that never reads does not slow the pod; its copy is dropped and it is told', async () => {
    // Given a session whose incoming streams are never read (its credit runs out)
    const stuck = await connectSession(control, { user: 'stuck' });
    sessions.push(stuck);
    stuck.mux.removeAllListeners('stream');
    stuck.mux.on('stream', (stream) => stream.on('error', () => undefined)); // never read: no credit goes back
    expect((await stuck.subscribe(3000, 'mirror')).type).toBe('subscribed');
    // When a client uploads far more than the tunnel's window plus the agent's mirror buffer
    const body = 'x'.repeat(4 * 1024 * 1024);
    const answer = await httpGet(client, '/big', { method: 'POST', body });
    // Then the pod got all of it and answered
    expect(answer.body).toBe(`pod: POST /big body=${body}`);
    // And the stuck session was told its copy was dropped
    await waitFor(() => stuck.messages.some((m) => m.type === 'log' && m.level === 'warn' && /copy of connection .* dropped/.test(m.message)), 'the drop notice');
  });
});
