// The TUI's keys: m / p / f / q call the session controls, c clears, keys stay off without raw mode.
import { PassThrough } from 'node:stream';
import { describe, expect, it, vi } from 'vitest';
import { render } from 'ink-testing-library';
import { render as inkRender } from 'ink';
import { App } from './App.js';
import { ViewStore } from '../store.js';
import type { SessionControls } from '../../reporter.js';
import { startupEvents, trafficEvents } from '../../../testkit/report-events.js';
import { waitFor } from '../../../testkit/wait.js';

function recordingControls(): { controls: SessionControls; calls: string[] } {
  const calls: string[] = [];
  const controls: SessionControls = {
    setMode: async (mode) => void calls.push(`setMode ${mode}`),
    pause: async () => void calls.push('pause'),
    resume: async () => void calls.push('resume'),
    setHeaderFilter: async (filter) => void calls.push(`setHeaderFilter ${filter ?? '(none)'}`),
    stop: async () => void calls.push('stop'),
  };
  return { controls, calls };
}

async function readySession() {
  const store = new ViewStore();
  const onInterrupt = vi.fn();
  const app = render(<App store={store} onInterrupt={onInterrupt} />);
  for (const event of [...startupEvents(), ...trafficEvents()]) store.dispatch(event);
  const { controls, calls } = recordingControls();
  store.setControls(controls);
  await waitFor(
    'the live view',
    () => app.lastFrame()?.includes('/apis/farm.example.com/v1/llamas') && app.lastFrame()?.includes('q quit'),
  );
  // ink enables raw mode and starts reading stdin in an effect after the first render.
  await waitFor('ink to read keys', () => app.stdin.listenerCount('readable') > 0);
  return { store, app, calls, onInterrupt };
}

describe('App keys', () => {
  it('d shows every change of the newest write (--shadow), d again hides it', async () => {
    // Given a ready session whose local command wrote a Deployment with many changes
    const { store, app } = await readySession();
    const spec = (n: number) => Object.fromEntries(Array.from({ length: 6 }, (_, i) => [`field${i}`, n]));
    store.dispatch({
      type: 'write',
      id: '1',
      verb: 'update',
      kind: 'Deployment',
      resource: 'deployments',
      namespace: 'default',
      name: 'hello',
      status: 200,
      result: 'dry-run',
      before: { spec: spec(1) },
      after: { spec: spec(2) },
    });
    // Then its row shows the first changes and how many more
    await waitFor('the diff line', () => app.lastFrame()?.includes('… 3 more (d)'));
    expect(app.lastFrame()).not.toContain('spec.field5');
    // When d is pressed
    app.stdin.write('d');
    // Then the diff panel lists every change
    await waitFor('the diff panel', () => app.lastFrame()?.includes('spec.field5: 1 → 2'));
    expect(app.lastFrame()).toContain('update Deployment default/hello → dry-run 200');
    // When d is pressed again, the panel goes
    app.stdin.write('d');
    await waitFor('the panel closed', () => !app.lastFrame()?.includes('spec.field5'));
    app.unmount();
  });

  it('m switches steal → mirror, and the header follows', async () => {
    // Given a ready stealing session
    const { app, calls } = await readySession();
    expect(app.lastFrame()).toContain(':3000 stealing → local :3000');
    // When m is pressed
    app.stdin.write('m');
    // Then the controls are asked for mirror and the header shows it
    await waitFor('setMode mirror', () => calls.includes('setMode mirror'));
    await waitFor('header in mirror mode', () => app.lastFrame()?.includes(':3000 mirroring → local :3000'));
    app.unmount();
  });

  it('p pauses and p again resumes', async () => {
    // Given a ready session
    const { app, calls } = await readySession();
    // When p is pressed
    app.stdin.write('p');
    // Then the session is paused and the header says the traffic goes to the pod
    await waitFor('pause', () => calls.includes('pause'));
    await waitFor('paused header', () => app.lastFrame()?.includes('paused (steal, traffic → pod)'));
    // When p is pressed again
    app.stdin.write('p');
    // Then it resumes
    await waitFor('resume', () => calls.includes('resume'));
    expect(calls).toEqual(['pause', 'resume']);
    app.unmount();
  });

  it('q stops the session (and Ctrl-C too)', async () => {
    // Given a ready session
    const { app, calls, onInterrupt } = await readySession();
    // When q is pressed
    app.stdin.write('q');
    // Then controls.stop() is called and the UI says it is stopping
    await waitFor('stop', () => calls.includes('stop'));
    await waitFor('stopping line', () => app.lastFrame()?.includes('stopping'));
    expect(onInterrupt).not.toHaveBeenCalled();
    app.unmount();

    const second = await readySession();
    second.app.stdin.write('\u0003');
    await waitFor('stop on Ctrl-C', () => second.calls.includes('stop'));
    second.app.unmount();
  });

  it('f opens the filter input; typing, Backspace and Enter set the header filter', async () => {
    // Given a ready session
    const { app, calls } = await readySession();
    // When f is pressed, a filter typed and Enter pressed
    app.stdin.write('f');
    await waitFor('filter input', () => app.lastFrame()?.includes('header filter'));
    app.stdin.write('x-user: alic');
    app.stdin.write('x');
    app.stdin.write('\u007f');
    app.stdin.write('e');
    await waitFor('typed filter', () => app.lastFrame()?.includes('› x-user: alice'));
    app.stdin.write('\r');
    // Then the controls get the filter and the header shows it
    await waitFor(`setHeaderFilter (calls: ${calls.join(', ')}; frame: ${app.lastFrame()})`, () =>
      calls.includes('setHeaderFilter x-user: alice'),
    );
    await waitFor('filter in header', () => app.lastFrame()?.includes('filter header x-user: alice'));
    // And keys typed as one chunk ("fx-user: bob\r") go to the filter, not to the main view
    app.stdin.write('fx-user: bob\r');
    await waitFor(`setHeaderFilter bob (calls: ${calls.join(', ')})`, () =>
      calls.includes('setHeaderFilter x-user: bob'),
    );
    expect(calls).not.toContain('stop');
    app.unmount();
  });

  it('c clears the list and counters, ? shows the help', async () => {
    // Given a session with traffic
    const { app } = await readySession();
    expect(app.lastFrame()).toContain('requests 2');
    // When c is pressed
    app.stdin.write('c');
    // Then the list is empty and the counters are zero
    await waitFor('cleared counters', () => app.lastFrame()?.includes('requests 0'));
    expect(app.lastFrame()).not.toContain('/apis/farm.example.com/v1/llamas');
    // When ? is pressed
    app.stdin.write('?');
    await waitFor('help panel', () => app.lastFrame()?.includes('pause (traffic goes back to the pod) / resume'));
    app.unmount();
  });

  it('q before the session is ready interrupts the start-up instead', async () => {
    // Given a session still starting (no controls yet)
    const store = new ViewStore();
    const onInterrupt = vi.fn();
    const app = render(<App store={store} onInterrupt={onInterrupt} />);
    store.dispatch({ type: 'step', id: 'target', status: 'start', title: 'resolve target' });
    await waitFor('first step', () => app.lastFrame()?.includes('resolve target'));
    await waitFor('ink to read keys', () => app.stdin.listenerCount('readable') > 0);
    // When q is pressed
    app.stdin.write('q');
    // Then the start-up is interrupted
    await waitFor('onInterrupt', () => onInterrupt.mock.calls.length > 0);
    app.unmount();
  });

  it('keys stay off when stdin cannot go raw (not a TTY)', async () => {
    // Given a stdin that is not a terminal
    const stdin = Object.assign(new PassThrough(), {
      isTTY: false,
      setRawMode: () => undefined,
      ref: () => undefined,
      unref: () => undefined,
    });
    const stdout = Object.assign(new PassThrough(), { columns: 100, rows: 30, isTTY: false });
    let frame = '';
    stdout.on('data', (chunk: Buffer) => (frame += chunk.toString()));
    const store = new ViewStore();
    const instance = inkRender(<App store={store} onInterrupt={() => undefined} />, {
      stdin: stdin as unknown as NodeJS.ReadStream,
      stdout: stdout as unknown as NodeJS.WriteStream,
      debug: true,
      patchConsole: false,
      exitOnCtrlC: false,
    });
    for (const event of startupEvents()) store.dispatch(event);
    store.setControls(recordingControls().controls);
    // When the live view is up
    await waitFor('the no-keys notice', () => frame.includes('keys need a terminal with raw mode'));
    // Then ink does not read stdin at all (no raw mode, no key handling)
    expect(stdin.listenerCount('readable') + stdin.listenerCount('data')).toBe(0);
    instance.unmount();
  });
});
