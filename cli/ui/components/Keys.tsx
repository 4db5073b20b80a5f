// The key bar, the `?` help panel, the `f` filter input and the `d` diff panel.
import { Box, Text } from 'ink';
import type { TrafficRow } from '../state.js';

export const KEY_HELP: ReadonlyArray<readonly [string, string]> = [
  ['m', 'switch steal ↔ mirror'],
  ['p', 'pause (traffic goes back to the pod) / resume'],
  ['f', 'edit the HTTP header filter (Enter applies, Esc cancels, empty = whole port)'],
  ['c', 'clear the list, counters and output pane'],
  ['d', 'show / hide the diff of the newest write (--shadow)'],
  ['?', 'show / hide this help'],
  ['q', 'quit (also Ctrl-C): stops the local command and gives the pod its traffic back'],
];

export function KeyBar({ keysActive }: { keysActive: boolean }) {
  if (!keysActive) return <Text dimColor>keys need a terminal with raw mode; Ctrl-C stops devop</Text>;
  return (
    <Text dimColor wrap="truncate">
      m steal↔mirror p pause f filter c clear d diff ? help q quit
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

/** Lines the diff panel shows at most (the newest write's changes; the state keeps up to MAX_WRITE_CHANGES). */
export const DIFF_PANEL_LINES = 12;

/** The `d` panel: every change of the newest write (--shadow), one per line. */
export function DiffPanel({ row }: { row: TrafficRow | undefined }) {
  const write = row?.write;
  return (
    <Box flexDirection="column" borderStyle="round" paddingX={1}>
      {write ? (
        <>
          <Text bold>
            {write.verb} {write.object} → {write.result} {row?.status}
          </Text>
          {write.changes.slice(0, DIFF_PANEL_LINES).map((change) => (
            // A change names its field path: unique within one write.
            <Text key={change} wrap="truncate">
              <Text color="yellow">±</Text> {change}
            </Text>
          ))}
          {write.changes.length > DIFF_PANEL_LINES ? (
            <Text dimColor>… {write.changes.length - DIFF_PANEL_LINES} more (--output json has the whole objects)</Text>
          ) : null}
        </>
      ) : (
        <Text dimColor>no writes yet: under --shadow each write of the local command is listed with its diff</Text>
      )}
    </Box>
  );
}
