// Holds the TUI's view state between events and tells the Ink app to re-render — at most once per frame interval, so a
// burst of requests costs one render, not one per event.
import type { ReportEvent, SessionControls } from '../reporter.js';
import { applyEvent, initialViewState, type ViewState } from './state.js';

/** 12 renders a second keeps the spinner smooth and leaves the CPU to the tunnel under load. */
export const RENDER_INTERVAL_MS = 80;

export class ViewStore {
  private state: ViewState;
  private controls: SessionControls | undefined;
  private readonly listeners = new Set<() => void>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly now: () => number = Date.now) {
    this.state = initialViewState(now());
  }

  getState = (): ViewState => this.state;

  getControls = (): SessionControls | undefined => this.controls;

  subscribe = (listener: () => void): (() => void) => {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  };

  dispatch(event: ReportEvent): void {
    this.state = applyEvent(this.state, event, this.now());
    // The outcome of the session is rendered at once: the process may end right after it.
    if (event.type === 'exit' || event.type === 'error' || event.type === 'ready' || event.type === 'step')
      this.flush();
    else this.schedule();
  }

  /** Local UI changes (keys): rendered at once, the user is looking. */
  update(change: (state: ViewState) => ViewState): void {
    this.state = change(this.state);
    this.flush();
  }

  setControls(controls: SessionControls): void {
    this.controls = controls;
    this.flush();
  }

  flush = (): void => {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    for (const listener of this.listeners) listener();
  };

  dispose(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private schedule(): void {
    if (this.timer) return;
    this.timer = setTimeout(this.flush, RENDER_INTERVAL_MS);
  }
}
