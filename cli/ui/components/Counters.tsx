// The counters line under the traffic list: requests, connections, bytes in/out, errors.
import { Text } from 'ink';
import type { Counters as CountersState } from '../state.js';
import { formatBytes } from '../lines.js';

export function Counters({ counters }: { counters: CountersState }) {
  return (
    <Text wrap="truncate">
      requests <Text bold>{counters.requests}</Text> connections <Text bold>{counters.connections}</Text>
      {' in '}
      <Text bold>{formatBytes(counters.bytesIn)}</Text>
      {' out '}
      <Text bold>{formatBytes(counters.bytesOut)}</Text>
      {' errors '}
      <Text bold color={counters.errors > 0 ? 'red' : undefined}>
        {counters.errors}
      </Text>
    </Text>
  );
}
