// Steal with an answer deadline (webhook targets): a connection the local command has not answered in time is replayed
// to the pod, which answers; the traffic event says so. The local command is a real process, stopped with SIGSTOP as a
// debugger would stop it; a connection it answered is closed once idle, so the next request can fall back in its turn.
import { spawn, type ChildProcess } from 'node:child_process';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ANSWERED_IDLE_CLOSE_MS } from '../../agent/incoming/answer-fallback.js';
import { requireRoot } from '../../testkit/root.js';
import { PodNet, type Proc } from '../../testkit/netns.js';
import { connectSession, type TestSession } from '../../testkit/session-client.js';
import { httpGet, keepAliveAgent } from '../../testkit/http.js';
import { waitFor } from '../../testkit/wait.js';

const run = requireRoot('agent answer fallback');

/** The deadline the session asks for: short, so the suite is quick; the pod's answer must come soon after it. */
const DEADLINE_MS = 1000;

/** A local command in a process of its own (so that SIGSTOP stops it and nothing else), answering "local: …". */
async function startLocalProcess(): Promise<{ child: ChildProcess; port: number }> {
  const child = spawn(
    process.execPath,
    [
      '-e',
      `const s = require('node:http').createServer((q, r) => r.end('local: ' + q.method + ' ' + q.url));
       s.keepAliveTimeout = 60000;
       s.listen(0, '127.0.0.1', () => console.log(s.address().port));`,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const port = await new Promise<number>((resolve, reject) => {
    child.stdout?.once('data', (d: Buffer) => resolve(Number(String(d).trim())));
    child.once('exit', () => reject(new Error('the local process exited')));
  });
  return { child, port };
}

describe.runIf(run)('agent: steal with an answer deadline', () => {
  const net = new PodNet();
  let pod: Proc;
  let control: string;
  let client: string;
  let local: { child: ChildProcess; port: number };
  let session: TestSession;

  beforeAll(async () => {
    await net.setup();
    pod = await net.startPod({ port: 3000 });
    const agent = await net.startAgent();
    control = await net.relay(net.podNs, '127.0.0.1', agent.port);
    client = await net.relay(net.clientNs, net.podIP, 3000);
    local = await startLocalProcess();
    session = await connectSession(control, { local });
    expect((await session.subscribe(3000, 'steal', { answerWithinMs: DEADLINE_MS })).type).toBe('subscribed');
  });
  afterAll(async () => {
    local?.child.kill('SIGCONT');
    local?.child.kill('SIGKILL');
    session?.mux.close('test over');
    await net.teardown();
  });

  test('the local command answers while it runs, and the pod sees nothing', async () => {
    expect((await httpGet(client, '/live', { method: 'POST', body: 'x' })).body).toBe('local: POST /live');
    expect(net.podRequests(pod).filter((l) => l.includes('/live'))).toEqual([]);
  });

  test('stopped (SIGSTOP), the local command does not answer: the pod does, after the deadline, and it is reported', async () => {
    // Given the local process stopped, as in a debugger
    local.child.kill('SIGSTOP');
    // When a request comes
    const started = Date.now();
    const answer = await httpGet(client, '/while-stopped', { method: 'POST', body: '{"review":1}' });
    const took = Date.now() - started;
    // Then the pod answered it, the whole request replayed, soon after the deadline
    expect(answer.body).toBe('pod: POST /while-stopped body={"review":1}');
    expect(took).toBeGreaterThanOrEqual(DEADLINE_MS - 50);
    expect(took).toBeLessThan(DEADLINE_MS + 1500);
    // And the session was told that the pod answered, and why
    await waitFor('the fallback traffic event', () =>
      session.traffic.some(
        (t) => t.kind === 'connection' && t.to === 'pod' && (t.fallbackMs ?? 0) >= DEADLINE_MS && t.phase === 'open',
      ),
    );
  });

  test('resumed (SIGCONT), the local command answers the next request again, even from a keep-alive client', async () => {
    // Given a keep-alive client whose request the pod answered while the local process was stopped
    local.child.kill('SIGSTOP');
    const keep = keepAliveAgent();
    expect((await httpGet(client, '/stopped-keep', { agent: keep })).body).toBe('pod: GET /stopped-keep');
    // When the local process resumes, and the client sends its next request a moment later on the same agent
    local.child.kill('SIGCONT');
    await new Promise((resolve) => setTimeout(resolve, 2 * ANSWERED_IDLE_CLOSE_MS));
    // Then the local command answers it (the connection the pod answered was closed once idle)
    expect((await httpGet(client, '/resumed', { agent: keep })).body).toBe('local: GET /resumed');
    keep.destroy();
  });

  test('a connection the local command answered is closed once idle, so the next request comes on a new one', async () => {
    // Given a keep-alive connection whose request the local command answered
    const socket = connect(client);
    const ended = new Promise<number>((resolve) => socket.once('end', () => resolve(Date.now())));
    let text = '';
    socket.on('data', (d: Buffer) => {
      text += d.toString();
    });
    socket.write('GET /keep HTTP/1.1\r\nHost: pod\r\nConnection: keep-alive\r\n\r\n');
    await waitFor('the answer', () => text.includes('local: GET /keep'));
    const answeredAt = Date.now();
    // Then the agent ends it after the idle time (the local command would have kept it for 60 s)
    const endedAt = await ended;
    expect(endedAt - answeredAt).toBeGreaterThanOrEqual(ANSWERED_IDLE_CLOSE_MS - 100);
    expect(endedAt - answeredAt).toBeLessThan(ANSWERED_IDLE_CLOSE_MS + 1000);
    socket.destroy();
  });

  test('a local command that is gone (its port refuses) leaves the request to the pod at once, not at the deadline', async () => {
    // Given the local process dead: the session's connection to it is refused, and the session resets the stream
    local.child.kill('SIGKILL');
    await new Promise((resolve) => local.child.once('exit', resolve));
    // When a request comes
    const started = Date.now();
    const answer = await httpGet(client, '/after-crash');
    // Then the pod answers it well before the deadline
    expect(answer.body).toBe('pod: GET /after-crash');
    expect(Date.now() - started).toBeLessThan(DEADLINE_MS / 2);
  });
});
