// A real terminal for TUI tests: one tmux server per test run on its own socket (so parallel runs and other users'
// tmux are untouched), a pane running a shell command, capture-pane to read the screen, send-keys to type.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';

/** How long a TUI test waits for the screen: generous, CI machines have 2 cores and other suites' clusters may still be
 * winding down. */
export const SCREEN_WAIT_MS = 45_000;

export class TmuxPane {
  readonly socket = `devop-ui-${process.pid}-${randomBytes(3).toString('hex')}`;
  readonly session = 'ui';

  /** Starts `command` (run by sh) in a detached width×height terminal; the pane stays after the command ends. */
  constructor(command: string, options: { width?: number; height?: number } = {}) {
    this.tmux(
      '-f',
      '/dev/null',
      'new-session',
      '-d',
      '-s',
      this.session,
      '-x',
      String(options.width ?? 140),
      '-y',
      String(options.height ?? 45),
      command,
    );
    this.tmux('set-option', '-t', this.session, 'remain-on-exit', 'on');
  }

  capture(): string {
    return this.tmux('capture-pane', '-p', '-t', this.session);
  }

  /** Polls the screen until `test` accepts it; resolves with that screen, fails naming `what` with the last one. */
  async waitForScreen(what: string, test: (text: string) => boolean, timeoutMs = SCREEN_WAIT_MS): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    let text = '';
    while (Date.now() < deadline) {
      text = this.capture();
      if (test(text)) return text;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`timed out waiting for the screen to show ${what}\n--- screen ---\n${text}`);
  }

  /** The screen and the lines scrolled off it, with escape codes (-e): what really reached the terminal. */
  captureAll(): string {
    return this.tmux('capture-pane', '-p', '-e', '-S', '-', '-t', this.session);
  }

  /** tmux key names (`Enter`, `C-c`) or literal text with `literal: true`. */
  sendKeys(keys: string, literal = false): void {
    this.tmux('send-keys', '-t', this.session, ...(literal ? ['-l', keys] : [keys]));
  }

  kill(): void {
    const socketPath = this.socketPath();
    try {
      this.tmux('kill-server');
    } catch {
      // already gone
    }
    // tmux leaves its socket file behind after kill-server.
    if (socketPath) rmSync(socketPath, { force: true });
  }

  private socketPath(): string | undefined {
    try {
      return this.tmux('display-message', '-p', '#{socket_path}').trim() || undefined;
    } catch {
      return undefined;
    }
  }

  private tmux(...args: string[]): string {
    return execFileSync('tmux', ['-L', this.socket, ...args], { encoding: 'utf8' });
  }
}

/** Quotes a word for sh. */
export function shellQuote(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}
