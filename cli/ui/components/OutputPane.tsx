// The local command's own output, in its own pane below the traffic (stderr lines marked).
import { Box, Text } from 'ink';
import type { OutputLine } from '../state.js';

export function OutputPane({ lines, height }: { lines: OutputLine[]; height: number }) {
  const visible = lines.slice(-Math.max(1, height));
  return (
    <Box flexDirection="column">
      {visible.length === 0 ? <Text dimColor> (no output yet)</Text> : null}
      {visible.map((line, index) => (
        <Text key={index} wrap="truncate" color={line.stream === 'stderr' ? 'yellow' : undefined}>
          {line.stream === 'stderr' ? '! ' : '  '}
          {line.text}
        </Text>
      ))}
    </Box>
  );
}
