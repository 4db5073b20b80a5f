// Faults on the native data path: kill -9 of the agent while devop-splice holds stolen connections. devop-splice and
// devop-nft (the owner of the redirect table) both get the agent's parent-death signal; the table must go only after
// devop-splice's connections have ended, or their FIN/RST leave without the redirect's NAT and their clients wait.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { FEATURES } from '../../shared/protocol.js';
import { httpGet } from '../../testkit/http.js';
import { PodNet } from '../../testkit/netns.js';
import { requireRoot } from '../../testkit/root.js';
import { connectSession } from '../../testkit/session-client.js';
import { waitFor } from '../../testkit/wait.js';

const run = requireRoot('agent native faults');
const NATIVE_FEATURES = [FEATURES.traffic, FEATURES.streamEvents, FEATURES.nativeSplice];
/** The design's failure rule. */
const RECOVERY_MS = 2000;
/**
 * Which of the two helpers ends first is a race: before devop-nft waited for devop-splice, 2 of 12 rounds left the
 * client waiting for its own timeout.
 */
const ROUNDS = 10;

describe.runIf(run)('agent: faults on the native data path', () => {
  const net = new PodNet();
  let client: string;

  beforeAll(async () => {
    await net.setup();
    await net.startPod({ port: 3000 });
    client = await net.relay(net.clientNs, net.podIP, 3000);
  });
  afterAll(async () => {
    await net.teardown();
  });

  test(`kill -9 of the agent while devop-splice holds a stolen request: its client learns at once (${ROUNDS} rounds)`, async () => {
    const waited: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      // Given a whole steal on the native path whose local command takes requests and never answers
      const held: string[] = [];
      const silent = createServer((req) => held.push(req.url ?? ''));
      await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
      const agent = await net.startAgent({ DEVOP_AGENT_NATIVE_PORT: '0' });
      const control = await net.relay(net.podNs, '127.0.0.1', agent.port);
      const nativeRelay = await net.relay(net.podNs, '127.0.0.1', agent.nativePort ?? 0);
      const local = { port: (silent.address() as AddressInfo).port };
      const session = await connectSession(control, { local, features: NATIVE_FEATURES });
      await session.joinNative(nativeRelay);
      expect((await session.subscribe(3000, 'steal')).type).toBe('subscribed');
      try {
        // And a client's request held by the local command, which came over the native connection
        const path = `/held-${round}`;
        const answer = httpGet(client, path, { timeoutMs: 6000 }).then(
          () => 'answered',
          (err: Error) => err.message,
        );
        await waitFor(`the local command to hold ${path}`, () => held.includes(path));
        await waitFor('the stolen request on the native path', () => session.incoming.at(-1)?.native === true, 5000);
        // When the agent is killed
        const killedAt = Date.now();
        process.kill(agent.innerPid, 'SIGKILL');
        // Then the client's connection ends at once, not at its own timeout
        expect(await answer).not.toBe('answered');
        waited.push(Date.now() - killedAt);
      } finally {
        session.mux.close('round over');
        silent.closeAllConnections();
        silent.close();
      }
    }
    expect(Math.max(...waited), `ms each client waited: ${waited.join(', ')}`).toBeLessThan(RECOVERY_MS);
    // And the pod answers new connections within the failure rule's 2 s (one made while the dead agent's table still
    // points at devop-splice's closed listener is refused), with no rule of any agent left
    const podAnswers = async (): Promise<boolean> =>
      (await httpGet(client, '/after', { timeoutMs: 1000 }).catch(() => undefined))?.body === 'pod: GET /after';
    await waitFor('the pod to answer new connections', podAnswers, RECOVERY_MS);
    await waitFor('no devop rule left', async () => (await net.devopRules()).length === 0, RECOVERY_MS);
  }, 180_000);
});
