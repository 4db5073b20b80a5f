// A filtered steal whose pattern would backtrack catastrophically in a JavaScript RegExp: the agent matches filters in
// linear time (RE2), so one hostile request neither stalls the port's other requests nor the agent; patterns that
// need backtracking (backreferences, lookaround) are refused when they arrive on the wire.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { PodNet, type AgentProc } from '../../testkit/netns.js';
import {
  connectSession,
  startLocalCommand,
  type LocalCommand,
  type TestSession,
} from '../../testkit/session-client.js';
import { httpGet } from '../../testkit/http.js';

const run = requireRoot('agent filter regex');

/** The request that froze the agent for 20 s with `(a+)+$` under a backtracking RegExp. */
const HOSTILE_VALUE = `${'a'.repeat(28)}!`;

/** Well under a second: the linear match of 29 characters takes microseconds; the rest is the HTTP round trip. */
const ANSWER_WITHIN_MS = 1000;

async function timed<T>(request: Promise<T>): Promise<{ answer: T; ms: number }> {
  const started = performance.now();
  const answer = await request;
  return { answer, ms: Math.round(performance.now() - started) };
}

describe.runIf(run)('agent: filter patterns are matched in linear time', () => {
  const net = new PodNet();
  let agent: AgentProc;
  let control: string;
  let client: string;
  let local: LocalCommand;
  let alice: TestSession;

  beforeAll(async () => {
    await net.setup();
    await net.startPod({ port: 3000 });
    agent = await net.startAgent();
    control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    client = await net.relay(net.clientNs, net.podIP, 3000);
    local = await startLocalCommand('local-alice');
    alice = await connectSession(control, { local, user: 'alice' });
  });
  afterAll(async () => {
    alice?.mux.close('test over');
    await local?.close();
    await net.teardown();
  });

  test("a request built to backtrack `(a+)+$` is answered at once, and the port's other requests keep flowing", async () => {
    // Given alice steals :3000 for requests whose x-user header matches (a+)+$
    const subscribed = await alice.subscribe(3000, 'steal', { filter: { header: 'x-user: (a+)+$', match: 'all' } });
    expect(subscribed.type).toBe('subscribed');
    // When a client sends 28 `a`s and a `!` (no match) and, while that one is in flight, two more requests come
    const hostile = timed(httpGet(client, '/hostile', { headers: { 'x-user': HOSTILE_VALUE }, timeoutMs: 30_000 }));
    await new Promise((resolve) => setTimeout(resolve, 50));
    const [other, matching] = await Promise.all([
      timed(httpGet(client, '/other', { timeoutMs: 30_000 })),
      timed(httpGet(client, '/mine', { headers: { 'x-user': 'aaa' }, timeoutMs: 30_000 })),
    ]);
    const first = await hostile;
    const took = `hostile ${first.ms} ms, other ${other.ms} ms, matching ${matching.ms} ms`;
    // Then none waited: well under a second each (a backtracking RegExp held the agent's one thread for 20 s)
    expect(first.ms, took).toBeLessThan(ANSWER_WITHIN_MS);
    expect(other.ms, took).toBeLessThan(ANSWER_WITHIN_MS);
    expect(matching.ms, took).toBeLessThan(ANSWER_WITHIN_MS);
    // And each went where the filter says: the hostile one and the other to the pod, the matching one to alice
    expect(first.answer.body).toBe('pod: GET /hostile');
    expect(other.answer.body).toBe('pod: GET /other');
    expect(matching.answer.body).toBe('local-alice: GET /mine');
  });

  test('a filter with a backreference or a lookaround sent on the wire is refused, naming the problem', async () => {
    // Given a session that skips the CLI's check and sends the patterns itself
    const mallory = await connectSession(control, { user: 'mallory' });
    try {
      for (const [filter, problem] of [
        [{ header: 'x-user: (a)\\1', match: 'all' }, /header filter "\(a\)\\1" uses a backreference/],
        [{ path: '^/(?=admin)', match: 'all' }, /path filter "\^\/\(\?=admin\)" uses a lookahead/],
      ] as const) {
        // When it subscribes with the pattern
        const refused = await mallory.subscribe(3000, 'steal', { filter });
        // Then the agent refuses it with the reason and the fix
        expect(refused.type).toBe('refused');
        expect((refused as { reason: string }).reason).toMatch(problem);
        expect((refused as { hint?: string }).hint).toMatch(/without it \(RE2 syntax/);
      }
      // And the port still routes as before
      expect((await httpGet(client, '/after')).body).toBe('pod: GET /after');
    } finally {
      mallory.mux.close('test over');
    }
  });
});
