// Reconnecting a member whose tunnel was lost: the same agent resuming the session when it can, another live agent or
// a new one when it is dead, until the member's pod is gone or 2 minutes have passed.
import { CoreV1Api, type V1Pod } from '@kubernetes/client-node';
import { errorMessage, isUserError, UserError } from '../../shared/errors.js';
import { findAgent } from '../kube/agent-reuse.js';
import { apiErrorCode } from '../kube/errors.js';
import { debug, info, type Reporter } from '../reporter.js';
import { connectAgent } from './connect.js';
import { agentState, ATTEMPT_MS, type Member, type MemberContext, podFate, startAgent } from './member.js';
import { byeAndWait } from './tunnel-health.js';

/** Reconnect pacing: quick first tries (a port-forward blip), then at most every 2 s; give up after 2 minutes. */
export const RECONNECT_FIRST_DELAY_MS = 100;
export const RECONNECT_MAX_DELAY_MS = 2000;
export const RECONNECT_GIVE_UP_MS = 120_000;
/** How long a reconnect keeps asking the same agent to resume the session before it accepts a fresh one. */
const RESUME_RETRY_MS = 5000;

/** Exponential backoff: 100, 200, 400, … ms, capped at 2 s. Pure. */
export function backoffDelay(attempt: number): number {
  return Math.min(RECONNECT_MAX_DELAY_MS, RECONNECT_FIRST_DELAY_MS * 2 ** Math.min(attempt, 16));
}

export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * How a reconnect ended: `up` with the member's new link, session id and agent set (the caller adopts it), `gone` when
 * its pod went away, `over` when the session ended meanwhile. Throws when it gives up.
 */
export type ReconnectEnd = { kind: 'up'; resumed: boolean; startedAt: number } | { kind: 'gone' } | { kind: 'over' };

export async function reconnectMember(ctx: MemberContext, member: Member, reporter: Reporter): Promise<ReconnectEnd> {
  const started = Date.now();
  const core = ctx.kc.makeApiClient(CoreV1Api);
  let attempt = 0;
  let failures = 0;
  while (!ctx.isOver() && member.state === 'reconnecting') {
    if (Date.now() - started > RECONNECT_GIVE_UP_MS)
      throw new UserError(
        `could not reconnect to pod ${member.link.pod} for ${RECONNECT_GIVE_UP_MS / 1000} s`,
        'check the cluster (devop doctor) and run devop again',
      );
    let pod: V1Pod | undefined;
    let known = true;
    try {
      pod = await core.readNamespacedPod({ name: member.target.podName, namespace: member.target.namespace });
    } catch (err) {
      known = apiErrorCode(err) === 404; // 404: gone; anything else (API down): cannot tell yet
    }
    if (known && podFate(pod, member.target.podUid) === 'gone') return { kind: 'gone' };
    if (pod) member.target = { ...member.target, pod };
    try {
      if (failures >= 3 || (await agentState(ctx, member)) === 'dead') {
        // The agent may be dead (killed, its pod deleted): reuse another live one, or start a new one.
        const found = await findAgent(ctx.kc, member.target, ctx.agentOptions).catch(() => undefined);
        if (!found || found.name !== member.agent.name) {
          member.agent = found ?? (await startAgent(ctx, member.target));
          info(
            reporter,
            `pod ${member.link.pod}: ` +
              `${found ? `using agent ${found.name}` : `started a new agent ${member.agent.name}`}`,
          );
          failures = 0;
        }
      }
      const agentName = member.agent.name;
      const link = await connectAgent(ctx.kc, member.agent, member.target, {
        deadline: Date.now() + ATTEMPT_MS,
        identity: ctx.identity,
        features: ctx.features,
        resumeSessionId: member.sessionId,
      });
      if (ctx.isOver()) {
        link.mux.close('session over');
        return { kind: 'over' };
      }
      const resumed = link.hello.sessionId === member.sessionId;
      if (!resumed && agentName === member.agent.name && Date.now() - started < RESUME_RETRY_MS) {
        // The same agent may not have noticed the old connection drop yet (it refuses to resume a live one), and the
        // old session would keep the port: give it up on this fresh session and ask again shortly.
        await byeAndWait(link.mux, 'resume not granted yet', 200);
        throw new Error('the agent did not resume the session yet');
      }
      member.sessionId = link.hello.sessionId;
      member.link = { pod: member.link.pod, mux: link.mux, native: link.native };
      member.state = 'up';
      member.original = false;
      if (!resumed) member.sent = new Map();
      return { kind: 'up', resumed, startedAt: started };
    } catch (err) {
      failures++;
      if (isUserError(err) && /protocol version/.test(err.message)) throw err;
      debug(reporter, `reconnect to pod ${member.link.pod} failed: ${errorMessage(err)}`);
    }
    await delay(backoffDelay(attempt++));
  }
  return { kind: 'over' };
}
