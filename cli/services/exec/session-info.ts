// The session as the reporter shows it (header, `ready`, `session` events): target, pod, agent, ports and their mode.
import type { HttpFilter } from '../../../shared/protocol.js';
import { FEATURES } from '../../../shared/protocol.js';
import { type PortState, type Reporter, type SessionInfo, warn } from '../../reporter.js';
import { answerDeadlineMs } from '../../kube/targets/webhook.js';
import type { Session } from '../../session/connect.js';
import type { PortMapping } from '../ports.js';
import type { ExecServiceOptions } from './options.js';

export function describeFilter(filter: HttpFilter | undefined): string | undefined {
  if (!filter) return undefined;
  const parts = [
    filter.header && `header ${filter.header}`,
    filter.path && `path ${filter.path}`,
    filter.method && `method ${filter.method}`,
    filter.body && `body ${filter.body}`,
  ].filter(Boolean);
  return parts.length ? parts.join(filter.match === 'any' ? ' or ' : ' and ') : undefined;
}

export function sessionInfo(
  session: Session,
  options: Pick<ExecServiceOptions, 'target' | 'mode' | 'httpFilter'>,
  ports: readonly PortMapping[],
  stealsNodeConnections: boolean,
): SessionInfo {
  const target = session.target;
  return {
    target: options.target ?? 'targetless',
    namespace: target?.namespace ?? session.namespace,
    pod: target?.podName,
    node: target?.nodeName,
    container: target?.container.name,
    agent: { name: session.agent.name, reused: session.agent.reused, version: session.hello.agentVersion },
    webhooks: target?.webhooks,
    answerWithinMs: target?.webhooks ? answerDeadlineMs(target.webhooks) : undefined,
    ports: ports.map(
      (p): PortState => ({
        remotePort: p.remote,
        localPort: p.local,
        mode: options.mode,
        filter: describeFilter(options.httpFilter),
      }),
    ),
    ...(target?.extension
      ? {
          extension: {
            kind: target.extension.kind,
            name: target.extension.name,
            service: `${target.extension.service.namespace}/${target.extension.service.name}`,
            pods: 1,
            available: target.extension.available,
            stealsNodeConnections,
          },
        }
      : {}),
  };
}

/** Webhook requests need an agent that hands unanswered ones to the pod; an older agent lets them time out. */
export function warnIfAgentLacksFallback(session: Session, info: SessionInfo, reporter: Reporter): void {
  if (info.answerWithinMs && !session.hello.features.includes(FEATURES.answerFallback))
    warn(
      reporter,
      `agent ${session.hello.agentVersion} does not hand unanswered webhook requests to the pod: ` +
        'a paused local command makes them time out (use the agent image of this devop version)',
    );
}
