// Start-up steps: spinner while running, ✓ with detail and time when done, and a failure naming the step, why and the
// fix.
import { describe, expect, it } from 'vitest';
import { render } from 'ink-testing-library';
import { FailureBox, StepList } from './Steps.js';
import { applyEvent, failureOf, initialViewState, type StepView } from '../state.js';
import type { ReportEvent } from '../../reporter.js';
import { failureEvents } from '../../../testkit/report-events.js';

const now = 1_000_000;

describe('StepList', () => {
  it('shows done steps with detail and time, and the running step with a spinner and its elapsed time', () => {
    // Given two finished steps and one in progress for 1.5 s
    const steps: StepView[] = [
      {
        id: 'target',
        title: 'resolve target',
        status: 'done',
        detail: 'pod/echo-1 (Ready)',
        startedAt: now - 2000,
        ms: 12,
      },
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
    // Given a start-up whose agent step failed with a UserError (message + hint)
    const state = failureEvents().reduce((current, event) => applyEvent(current, event, now), initialViewState(now));
    const failure = failureOf(state);
    // When the steps and the failure are rendered
    const { lastFrame } = render(
      <>
        <StepList steps={state.steps} now={now} />
        {failure ? <FailureBox failure={failure} /> : null}
      </>,
    );
    const frame = lastFrame() ?? '';
    // Then the step line has ✗ and the failure box says which step, why and the fix
    expect(frame).toContain('✗ agent: image pull failed 3.0 s');
    expect(frame).toContain('✗ agent failed');
    expect(frame).toContain('why: image pull failed: the agent pod cannot pull ghcr.io/devop/agent:nope');
    expect(frame).toContain('fix: pass --agent-image with an image your cluster can pull');
  });

  it('takes the fix from the step event itself when it carries one', () => {
    // Given a failed step with a hint and no error event
    const state = [
      { type: 'step', id: 'tunnel', status: 'start', title: 'tunnel' },
      {
        type: 'step',
        id: 'tunnel',
        status: 'fail',
        title: 'tunnel',
        detail: 'protocol version mismatch',
        hint: 'upgrade devop',
        ms: 20,
      },
    ].reduce((current, event) => applyEvent(current, event as ReportEvent, now), initialViewState(now));
    // Then the failure names it with its fix
    expect(failureOf(state)).toEqual({
      id: 'tunnel',
      title: 'tunnel',
      why: 'protocol version mismatch',
      fix: 'upgrade devop',
    });
  });
});
