// The devop TUI: start-up steps, then the live view (header, traffic list, counters, output pane) steered by keys.
import { useEffect, useRef, useState, useSyncExternalStore } from 'react';
import { Box, Text, useInput, useStdin, useStdout, type Key } from 'ink';
import { errorMessage } from '../../../shared/errors.js';
import type { SessionControls, SessionInfo, TrafficMode } from '../../reporter.js';
import type { ViewStore } from '../store.js';
import { addNotice, clearTraffic, failureOf, type ViewState } from '../state.js';
import { Counters } from './Counters.js';
import { Header } from './Header.js';
import { DIFF_PANEL_LINES, DiffPanel, FilterInput, HelpPanel, KEY_HELP, KeyBar } from './Keys.js';
import { OutputPane } from './OutputPane.js';
import { FailureBox, StepList } from './Steps.js';
import { TrafficList } from './TrafficList.js';

type Panel = 'none' | 'help' | 'filter' | 'diff';

export interface AppProps {
  store: ViewStore;
  /** Called for q / Ctrl-C before the session has handed over its controls (start-up): stop the run some other way. */
  onInterrupt(): void;
  verbose?: boolean;
}

const DEFAULT_ROWS = 24;
const DEFAULT_COLUMNS = 100;
/** The spinner and elapsed times need a re-render this often while something is in progress. */
const TICK_MS = 100;

function useNow(active: boolean): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    if (!active) return undefined;
    const timer = setInterval(() => setNow(Date.now()), TICK_MS);
    return () => clearInterval(timer);
  }, [active]);
  return active ? now : Date.now();
}

function withSession(state: ViewState, change: (session: SessionInfo) => SessionInfo): ViewState {
  return state.session ? { ...state, session: change(state.session) } : state;
}

function headerFilterOf(session: SessionInfo | undefined): string {
  const filter = session?.ports.find((port) => port.filter)?.filter ?? '';
  return filter.replace(/^header\s+/, '');
}

export function App({ store, onInterrupt, verbose = false }: AppProps) {
  const state = useSyncExternalStore(store.subscribe, store.getState);
  const { isRawModeSupported } = useStdin();
  const { stdout } = useStdout();
  // Refs hold what the key handler must see at once: keys typed before the next render still go to the right place.
  const panelRef = useRef<Panel>('none');
  const [panel, setPanelState] = useState<Panel>('none');
  const setPanel = (next: Panel) => {
    panelRef.current = next;
    setPanelState(next);
  };
  const filterRef = useRef('');
  const [filterValue, setFilterState] = useState('');
  const setFilter = (next: string) => {
    filterRef.current = next;
    setFilterState(next);
  };
  const keysActive = Boolean(isRawModeSupported);
  const failure = failureOf(state);
  const starting = !state.readyAt && !failure;
  const now = useNow(
    (starting && state.steps.some((step) => step.status === 'running')) || (state.stopping && !state.exit),
  );

  const run = (
    label: string,
    action: (controls: SessionControls) => Promise<void>,
    optimistic: (state: ViewState) => ViewState,
  ) => {
    const controls = store.getControls();
    if (!controls) {
      store.update((current) =>
        addNotice(current, { level: 'warn', message: `${label}: not ready yet, wait for the session to start` }),
      );
      return;
    }
    action(controls).then(
      () => store.update(optimistic),
      (error: unknown) =>
        store.update((current) =>
          addNotice(current, {
            level: 'error',
            message: `${label} failed: ${errorMessage(error)}`,
          }),
        ),
    );
  };

  const quit = () => {
    const controls = store.getControls();
    const again = store.getState().stopping;
    store.update((current) => ({ ...current, stopping: true }));
    if (controls && !again) controls.stop().catch(() => onInterrupt());
    else onInterrupt();
  };

  /** One key of the main view; returns false when it opened the filter input (the rest of a chunk belongs to it). */
  const onKey = (input: string, ctrl: boolean, escapeKey: boolean): boolean => {
    const helpOpen = panelRef.current === 'help';
    const diffOpen = panelRef.current === 'diff';
    if ((ctrl && input === 'c') || input === 'q') quit();
    else if (helpOpen && (input === '?' || escapeKey)) setPanel('none');
    else if (diffOpen && (input === 'd' || escapeKey)) setPanel('none');
    else if (input === '?') setPanel('help');
    else if (input === 'd') setPanel('diff');
    else if (input === 'c') store.update(clearTraffic);
    else if (input === 'f') {
      setFilter(headerFilterOf(store.getState().session));
      setPanel('filter');
      return false;
    } else if (input === 'm') {
      const current: TrafficMode = store.getState().session?.ports[0]?.mode ?? 'mirror';
      const next: TrafficMode = current === 'steal' ? 'mirror' : 'steal';
      run(
        `switch to ${next}`,
        (controls) => controls.setMode(next),
        (s) =>
          withSession(s, (session) => ({ ...session, ports: session.ports.map((port) => ({ ...port, mode: next })) })),
      );
    } else if (input === 'p') {
      const paused = Boolean(store.getState().session?.ports.some((port) => port.paused));
      if (paused)
        run(
          'resume',
          (controls) => controls.resume(),
          (s) =>
            withSession(s, (session) => ({
              ...session,
              ports: session.ports.map((port) => ({ ...port, paused: false })),
            })),
        );
      else
        run(
          'pause',
          (controls) => controls.pause(),
          (s) =>
            withSession(s, (session) => ({
              ...session,
              ports: session.ports.map((port) => ({ ...port, paused: true })),
            })),
        );
    }
    return true;
  };

  const submitFilter = (value: string) => {
    setPanel('none');
    const filter = value.trim() === '' ? undefined : value.trim();
    run(
      'set filter',
      (controls) => controls.setHeaderFilter(filter),
      (s) =>
        withSession(s, (session) => ({
          ...session,
          ports: session.ports.map((port) => ({ ...port, filter: filter ? `header ${filter}` : undefined })),
        })),
    );
  };

  const onFilterKey = (input: string, key: Key) => {
    if (key.ctrl && input === 'c') quit();
    else if (key.return) submitFilter(filterRef.current);
    else if (key.escape) setPanel('none');
    else if (key.backspace || key.delete) setFilter(filterRef.current.slice(0, -1));
    else if (key.ctrl && input === 'u') setFilter('');
    else if (!key.ctrl && !key.meta && /[\r\n]/.test(input)) submitFilter(filterRef.current + input.split(/[\r\n]/)[0]);
    // eslint-disable-next-line no-control-regex
    else if (!key.ctrl && !key.meta && input !== '' && !/[\u0000-\u001f]/.test(input))
      setFilter(filterRef.current + input);
  };

  useInput(
    (input, key) => {
      if (panelRef.current === 'filter') return onFilterKey(input, key);
      if (key.ctrl || key.escape || input.length <= 1) return void onKey(input, key.ctrl, key.escape);
      // Keys typed faster than a read arrive as one chunk ("?f"): take them one by one.
      const chars = Array.from(input);
      for (let i = 0; i < chars.length; i += 1) {
        if (!onKey(chars[i], false, false)) {
          const rest = chars.slice(i + 1).join('');
          if (rest !== '') {
            setFilter('');
            onFilterKey(rest, key);
          }
          return undefined;
        }
      }
      return undefined;
    },
    { isActive: keysActive },
  );

  const rows = stdout.rows || DEFAULT_ROWS;
  const columns = stdout.columns || DEFAULT_COLUMNS;
  const notices = state.notices.filter((notice) => verbose || notice.level !== 'debug');

  if (!state.readyAt || !state.session) {
    return (
      <Box flexDirection="column">
        <Text bold color="cyan">
          devop
        </Text>
        <StepList steps={state.steps} now={now} />
        {failure ? <FailureBox failure={failure} /> : null}
        {notices
          .filter(
            (notice) =>
              !failure || !(notice.level === 'error' && (notice.step === undefined || notice.step === failure.id)),
          )
          .map((notice, index) => (
            <Text
              key={index}
              color={notice.level === 'warn' ? 'yellow' : notice.level === 'error' ? 'red' : undefined}
              wrap="truncate"
            >
              {notice.message}
              {notice.hint ? ` — fix: ${notice.hint}` : ''}
            </Text>
          ))}
        {state.stopping && !state.exit ? <Text color="yellow">stopping…</Text> : null}
        {state.exit ? <ExitLine exit={state.exit} /> : null}
      </Box>
    );
  }

  // Header (1 + ports) + separators/counters/keys (5) + notices; what is left is shared by the list (2/3) and output
  // (1/3).
  const newestWrite = state.rows.findLast((row) => row.kind === 'write');
  // Border (2) and title (1) around the help's keys, or around the diff's lines.
  const panelHeight =
    panel === 'help'
      ? KEY_HELP.length + 3
      : panel === 'diff'
        ? Math.min(newestWrite?.write?.changes.length ?? 1, DIFF_PANEL_LINES + 1) + 3
        : 0;
  const fixed = 7 + Math.max(1, state.session.ports.length) + notices.length + panelHeight + (failure ? 4 : 0);
  const free = Math.max(4, rows - fixed - 1);
  const outputHeight = Math.max(2, Math.floor(free / 3));
  const listHeight = Math.max(2, free - outputHeight);
  return (
    <Box flexDirection="column">
      <Header session={state.session} rttMs={state.rttMs} />
      <Text dimColor>{'─ traffic '.padEnd(Math.min(columns, 120) - 1, '─')}</Text>
      <TrafficList rows={state.rows} height={listHeight} width={columns} />
      <Counters counters={state.counters} />
      <Text dimColor>{'─ local command output '.padEnd(Math.min(columns, 120) - 1, '─')}</Text>
      <OutputPane lines={state.output} height={outputHeight} />
      {notices.map((notice, index) => (
        <Text
          key={index}
          color={notice.level === 'warn' ? 'yellow' : notice.level === 'error' ? 'red' : undefined}
          wrap="truncate"
        >
          {notice.message}
          {notice.hint ? ` — fix: ${notice.hint}` : ''}
        </Text>
      ))}
      {failure ? <FailureBox failure={failure} /> : null}
      {panel === 'help' ? <HelpPanel /> : null}
      {panel === 'diff' ? <DiffPanel row={newestWrite} /> : null}
      {panel === 'filter' ? (
        <FilterInput value={filterValue} />
      ) : state.exit ? (
        <ExitLine exit={state.exit} />
      ) : state.stopping ? (
        <Text color="yellow">stopping: giving the pod its traffic back…</Text>
      ) : (
        <KeyBar keysActive={keysActive} />
      )}
    </Box>
  );
}

function ExitLine({ exit }: { exit: NonNullable<ViewState['exit']> }) {
  return exit.signal ? (
    <Text>local command ended by {exit.signal}</Text>
  ) : (
    <Text>local command exited with code {exit.code}</Text>
  );
}
