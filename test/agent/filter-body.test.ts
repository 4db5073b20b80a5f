// Filtered steal on a JSON body: a request whose body's value at the filter's path matches reaches the local command
// with its body intact, any other the pod; a body over the bound goes to the pod, saying why; non-JSON bodies and
// requests without one are never the filter's.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { MAX_FILTERED_BODY_BYTES } from '../../shared/body-filter.js';
import { requireRoot } from '../../testkit/root.js';
import { PodNet, type AgentProc } from '../../testkit/netns.js';
import {
  connectSession,
  startLocalCommand,
  type LocalCommand,
  type TestSession,
} from '../../testkit/session-client.js';
import { httpGet, keepAliveAgent } from '../../testkit/http.js';
import { waitFor } from '../../testkit/wait.js';

const run = requireRoot('agent body filter');

describe.runIf(run)('agent: JSON body filter', () => {
  const net = new PodNet();
  let agent: AgentProc;
  let client: string;
  let local: LocalCommand;
  let session: TestSession;

  beforeAll(async () => {
    await net.setup();
    await net.startPod({ port: 3000 });
    agent = await net.startAgent();
    const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    client = await net.relay(net.clientNs, net.podIP, 3000);
    local = await startLocalCommand('local');
    session = await connectSession(control, { local, user: 'alice' });
    const answer = await session.subscribe(3000, 'steal', { filter: { body: '$.user.name: ^alice$', match: 'all' } });
    expect(answer.type).toBe('subscribed');
  });
  afterAll(async () => {
    session?.mux.close('test over');
    await local?.close();
    await net.teardown();
  });

  const post = (path: string, body: string, type = 'application/json', agent = keepAliveAgent()) =>
    httpGet(client, path, { method: 'POST', body, headers: { 'content-type': type }, agent });

  test('Given a body filter, Then each request goes where its JSON body says, body intact, on one connection', async () => {
    const keep = keepAliveAgent();
    const alice = JSON.stringify({ user: { name: 'alice' }, n: 1 });
    const bob = JSON.stringify({ user: { name: 'bob' } });
    const answers = [
      await post('/1', alice, 'application/json', keep),
      await post('/2', bob, 'application/json', keep),
      await post('/3', alice, 'application/merge-patch+json; charset=utf-8', keep),
      await httpGet(client, '/4', { agent: keep }),
      await post('/5', alice, 'text/plain', keep),
      await post('/6', '{"user": {"name": "alice"', 'application/json', keep),
    ];
    expect(answers.map((a) => a.body)).toEqual([
      `local: POST /1 body=${alice}`,
      `pod: POST /2 body=${bob}`,
      `local: POST /3 body=${alice}`,
      'pod: GET /4',
      `pod: POST /5 body=${alice}`,
      'pod: POST /6 body={"user": {"name": "alice"',
    ]);
    expect(answers.slice(1).every((a) => a.reused)).toBe(true);
    keep.destroy();
  });

  test('Given a matching body over the bound, Then the pod answers it whole and the session is told why', async () => {
    const big = JSON.stringify({ user: { name: 'alice' }, pad: 'x'.repeat(MAX_FILTERED_BODY_BYTES) });
    const answer = await post('/big', big);
    expect(answer.body).toBe(`pod: POST /big body=${big}`);
    const event = await waitFor('the request event', () =>
      session.traffic.find((t) => t.kind === 'request' && t.path === '/big'),
    );
    expect(event).toMatchObject({
      to: 'pod',
      note: 'body over 64 KiB: the body filter cannot read it, the pod answers',
    });
  });

  test('Given a matching body sent in pieces, Then it is read whole before the request is routed', async () => {
    const body = JSON.stringify({ user: { name: 'alice' }, list: Array.from({ length: 2000 }, (_, i) => i) });
    const answer = await httpGet(client, '/chunked', {
      method: 'POST',
      body,
      headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
    });
    expect(answer.body).toBe(`local: POST /chunked body=${body}`);
  });
});
