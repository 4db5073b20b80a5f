// What the agent sends outside of requests, said through the reporter: stolen streams go to the local command (and the
// recorder), traffic events become rows, its log lines and session errors become lines.
import type { AgentMessage } from '../../../shared/protocol.js';
import { type Reporter, warn } from '../../reporter.js';
import type { ExchangeRecorder } from '../../record/tap.js';
import type { Session } from '../../session/connect.js';
import { trafficToEvent } from '../../session/traffic.js';
import { incomingStreamHandler } from '../incoming.js';
import type { PortMapping } from '../ports.js';

export function routeAgentEvents(
  session: Session,
  ports: PortMapping[],
  reporter: Reporter,
  recorder: ExchangeRecorder | undefined,
): void {
  const podName = session.target?.podName;
  session.tunnel.on(
    'stream',
    incomingStreamHandler({
      ports,
      onError: (message) => warn(reporter, message),
      recorder,
      onConnection: (connection, pod) => {
        const event = trafficToEvent(connection, pod ?? podName);
        if (event) reporter.emit(event);
      },
    }),
  );
  session.tunnel.on('message', agentMessageReporter(podName, reporter));
}

/** The agent's words about the session outside of answers: requests and answers, its log lines, its errors. */
export function agentMessageReporter(pod: string | undefined, reporter: Reporter): (msg: AgentMessage) => void {
  return (msg) => {
    if (msg.type === 'traffic') {
      const event = trafficToEvent(msg.event, pod);
      if (event) reporter.emit(event);
    } else if (msg.type === 'log') {
      reporter.emit({
        type: 'log',
        level: msg.level === 'error' ? 'warn' : msg.level,
        message: `agent: ${msg.message}`,
      });
    } else if (msg.type === 'error' && msg.id === undefined) {
      reporter.emit({ type: 'error', message: `agent: ${msg.message}`, hint: msg.hint });
    }
  };
}
