// Start-up steps: spinner while running, ✓ with detail and time when done, and a failure naming the step, why and the fix.
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { FailureBox, StepList } from './Steps.js';
import type { StepView } from '../state.js';

const now = 1_000_000;

describe('StepList', () => {
  it('shows done steps with detail and time, and the running step with a spinner and its elapsed time', () => {
    // Given two finished steps and one in progress for 1.5 s
    const steps: StepView[] = [
      { id: 'target', title: 'resolve target', status: 'done', detail: 'pod/echo-1 (Ready)', startedAt: now - 2000, ms: 12 },
      { id: 'agent', title: 'agent', status: 'done', detail: 'reused devop-agent-1', startedAt: now - 1990, ms: 40 },
      { id: 'tunnel', title: 'tunnel', status: 'running', startedAt: now - 1500 },
    ];
    // When rendered
    const { lastFrame } = render(<StepList steps={steps} now={now} />);
    const lines = (lastFrame() ?? '').split('\n');
    // Then each step is one line in order, with its mark, detail and time
    expect(lines[0]).toBe('✓ resolve target: pod/echo-1 (Ready) 12 ms');
    expect(lines[1]).toBe('✓ agent: reused devop-agent-1 40 ms');
    expect(lines[2]).toMatch(/^[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] tunnel 1\.5 s$/);
  });

  it('names the failed step, the reason and the fix', () => {
    // Given a failed agent step and its error
    const steps: StepView[] = [
      { id: 'target', title: 'resolve target', status: 'done', startedAt: now, ms: 10 },
      { id: 'agent', title: 'agent', status: 'fail', detail: 'image pull failed', startedAt: now, ms: 3000 },
    ];
    const failure = { message: 'cannot pull ghcr.io/devop/agent:nope', hint: 'pass --agent-image', step: 'agent' };
    // When the failure is rendered
    const { lastFrame } = render(
      <>
        <StepList steps={steps} now={now} />
        <FailureBox failure={failure} steps={steps} />
      </>,
    );
    const frame = lastFrame() ?? '';
    // Then the step line has ✗ and the failure box says which step, why and the fix
    expect(frame).toContain('✗ agent: image pull failed 3.0 s');
    expect(frame).toContain('✗ agent failed');
    expect(frame).toContain('why: cannot pull ghcr.io/devop/agent:nope');
    expect(frame).toContain('fix: pass --agent-image');
  });
});
