// The live view's header: target, pod, node, an extension's Available condition, webhooks, mode (and pause state) per
// port, filter, tunnel RTT.
import { Box, Text } from 'ink';
import { formatWebhooks, type SessionInfo } from '../../reporter.js';
import { formatExtension } from '../lines.js';

export function Header({ session, rttMs }: { session: SessionInfo; rttMs?: number }) {
  return (
    <Box flexDirection="column">
      <Text wrap="truncate">
        <Text bold color="cyan">
          devop
        </Text>{' '}
        {session.target}
        {session.pod ? (
          <Text>
            {' '}
            pod <Text bold>{session.pod}</Text>
          </Text>
        ) : null}
        {session.node ? <Text> node {session.node}</Text> : null}
        <Text> ns {session.namespace}</Text>
        {session.agent ? <Text dimColor> agent {session.agent.reused ? 'reused' : 'created'}</Text> : null}
        <Text> rtt {rttMs === undefined ? '–' : `${rttMs.toFixed(1)} ms`}</Text>
      </Text>
      {session.extension ? (
        <Text wrap="truncate">
          {'  '}
          {formatExtension(session.extension)}
        </Text>
      ) : null}
      {session.ports.map((port) => (
        <Text key={port.remotePort} wrap="truncate">
          {'  '}:{port.remotePort}{' '}
          <Text bold color={port.paused ? 'yellow' : port.mode === 'steal' ? 'magenta' : 'blue'}>
            {port.paused ? 'paused' : port.mode === 'steal' ? 'stealing' : 'mirroring'}
          </Text>
          {port.paused ? <Text dimColor> ({port.mode}, traffic → pod)</Text> : null} → local :{port.localPort}
          <Text> filter {port.filter ?? <Text dimColor>none</Text>}</Text>
        </Text>
      ))}
      {session.ports.length === 0 ? <Text dimColor> no ports (outgoing traffic and env only)</Text> : null}
      {session.webhooks ? (
        <Text wrap="truncate">
          {'  '}
          {formatWebhooks(session.webhooks)}
          <Text dimColor>: unanswered in time → the pod answers</Text>
        </Text>
      ) : null}
    </Box>
  );
}
