// The key bar, the `?` help panel and the `f` filter input.
import { Box, Text } from 'ink';

export const KEY_HELP: ReadonlyArray<readonly [string, string]> = [
  ['m', 'switch steal ↔ mirror'],
  ['p', 'pause (traffic goes back to the pod) / resume'],
  ['f', 'edit the HTTP header filter (Enter applies, Esc cancels, empty = whole port)'],
  ['c', 'clear the list, counters and output pane'],
  ['?', 'show / hide this help'],
  ['q', 'quit (also Ctrl-C): stops the local command and gives the pod its traffic back'],
];

export function KeyBar({ keysActive }: { keysActive: boolean }) {
  if (!keysActive) return <Text dimColor>keys need a terminal with raw mode; Ctrl-C stops devop</Text>;
  return (
    <Text dimColor wrap="truncate">
      m steal↔mirror p pause f filter c clear ? help q quit
    </Text>
  );
}

export function HelpPanel() {
  return (
    <Box flexDirection="column" borderStyle="round" paddingX={1}>
      <Text bold>keys</Text>
      {KEY_HELP.map(([key, text]) => (
        <Text key={key}>
          <Text bold color="cyan">
            {key.padEnd(2)}
          </Text>{' '}
          {text}
        </Text>
      ))}
    </Box>
  );
}

/**
 * The `f` filter being edited; App owns the value (keys are routed there) so no keystroke lands between two handlers.
 */
export function FilterInput({ value }: { value: string }) {
  return (
    <Text>
      header filter (Enter applies, Esc cancels, empty = whole port) › <Text color="cyan">{value}</Text>
      <Text inverse> </Text>
    </Text>
  );
}
