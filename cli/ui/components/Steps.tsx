// Start-up steps (resolve target → agent → tunnel → env → listen → traffic) with a spinner, elapsed time and, on
// failure, which step failed, why, and the fix.
import { Box, Text } from 'ink';
import type { StepView } from '../state.js';
import { formatDuration } from '../lines.js';

const SPINNER = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
const SPINNER_FRAME_MS = 80;

export function StepLine({ step, now }: { step: StepView; now: number }) {
  const elapsed = step.status === 'running' ? now - step.startedAt : (step.ms ?? 0);
  const mark =
    step.status === 'running'
      ? SPINNER[Math.floor(now / SPINNER_FRAME_MS) % SPINNER.length]
      : step.status === 'done'
        ? '✓'
        : '✗';
  const color = step.status === 'running' ? 'yellow' : step.status === 'done' ? 'green' : 'red';
  return (
    <Text wrap="truncate">
      <Text color={color}>{mark}</Text> {step.title}
      {step.detail ? <Text>: {step.detail}</Text> : null}
      <Text dimColor> {formatDuration(Math.max(0, elapsed))}</Text>
    </Text>
  );
}

export function StepList({ steps, now }: { steps: StepView[]; now: number }) {
  return (
    <Box flexDirection="column">
      {steps.map((step, index) => (
        <StepLine key={`${step.id}-${index}`} step={step} now={now} />
      ))}
    </Box>
  );
}

/** Names the failed step, the reason, and the fix. */
export function FailureBox({ failure }: { failure: { title: string; why: string; fix?: string } }) {
  return (
    <Box flexDirection="column" marginTop={1}>
      <Text color="red" bold>
        ✗ {failure.title} failed
      </Text>
      <Text>
        {'  '}why: {failure.why}
      </Text>
      {failure.fix ? (
        <Text>
          {'  '}fix: <Text color="cyan">{failure.fix}</Text>
        </Text>
      ) : null}
    </Box>
  );
}
