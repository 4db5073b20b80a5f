// What the examples' end-to-end suites share: kubectl 1.33 against the stand-in, polling, local processes.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { exitAfterOutput } from '../../testkit/exit-after-output.js';
import { agentImageEnv } from '../../testkit/target-cluster.js';

/** kubectl 1.33: beside the PATH's kubectl on devop's machines; DEVOP_TEST_KUBECTL names another (CI's kind job). */
export const KUBECTL = process.env.DEVOP_TEST_KUBECTL ?? '/usr/lib/google-cloud-sdk/bin/kubectl.1.33';
export const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));

export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * A kubectl bound to one kubeconfig with a private discovery cache, so runs never see each other's cached discovery.
 */
export class Kubectl {
  readonly cacheDir: string;

  constructor(readonly kubeconfig: string) {
    if (!existsSync(KUBECTL)) {
      throw new Error(
        `${KUBECTL} is missing: the examples' suites drive kubectl 1.33 (installed beside the kubectl on the PATH on ` +
          "devop's machines; DEVOP_TEST_KUBECTL names another).",
      );
    }
    this.cacheDir = mkdtempSync(join(tmpdir(), 'devop-examples-kubectl-'));
  }

  run(...args: string[]): Promise<Run> {
    return new Promise((done) => {
      execFile(
        KUBECTL,
        args,
        {
          cwd: ROOT,
          env: { ...process.env, KUBECONFIG: this.kubeconfig, KUBECACHEDIR: this.cacheDir },
          timeout: 60_000,
          maxBuffer: 16 << 20,
        },
        (err, stdout, stderr) => {
          const code = err
            ? typeof (err as { code?: unknown }).code === 'number'
              ? (err as { code: number }).code
              : 1
            : 0;
          done({ code, stdout, stderr });
        },
      );
    });
  }

  /** Runs and insists on success: the failure message carries kubectl's own words. */
  async ok(...args: string[]): Promise<string> {
    const r = await this.run(...args);
    if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')} exited ${r.code}: ${r.stderr || r.stdout}`);
    return r.stdout;
  }

  dispose(): void {
    rmSync(this.cacheDir, { recursive: true, force: true });
  }
}

/** Polls `probe` until it returns a value (not undefined); the deadline is generous because CI machines are shared. */
export async function eventually<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  timeoutMs = 120_000,
  intervalMs = 250,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** A process started by a suite, with its output collected; stop() ends it (SIGINT, then SIGKILL) and waits. */
export class LocalProcess {
  readonly child: ChildProcess;
  stdout = '';
  stderr = '';
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  constructor(command: string, args: string[], env: NodeJS.ProcessEnv) {
    // Its own process group, like a command typed in a terminal: signals reach it and everything it started.
    this.child = spawn(command, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    this.child.stdout!.on('data', (d: Buffer) => (this.stdout += d.toString()));
    this.child.stderr!.on('data', (d: Buffer) => (this.stderr += d.toString()));
    this.exit = exitAfterOutput(this.child);
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /**
   * Signals the process group (Ctrl-C in a terminal does the same) and waits until every process of it has ended — a
   * wrapper such as npx may exit before the program it started has finished shutting down — then SIGKILLs what is left
   * after the grace period.
   */
  async stop(
    signal: NodeJS.Signals = 'SIGINT',
    graceMs = 15_000,
  ): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    this.signalGroup(signal);
    const deadline = Date.now() + graceMs;
    while (this.groupAlive() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    this.signalGroup('SIGKILL');
    return this.exit;
  }

  private groupAlive(): boolean {
    if (this.child.pid === undefined) return false;
    try {
      process.kill(-this.child.pid, 0);
      return true;
    } catch {
      return false;
    }
  }

  private signalGroup(signal: NodeJS.Signals): void {
    if (this.child.pid === undefined) return;
    try {
      process.kill(-this.child.pid, signal);
    } catch {
      // the group is already gone
    }
  }

  output(): string {
    return `--- stdout ---\n${this.stdout}\n--- stderr ---\n${this.stderr}`;
  }
}

/**
 * The walkthrough's `devop exec -t apiservice/v1alpha.farm.example.com --steal --record HAR` with step 3 of the
 * farm-operator as the local command, listening on `localPort`.
 */
export function devopFarmStep3(kubeconfig: string, localPort: number, harFile: string): LocalProcess {
  const devop = ['bin/devop.js', 'exec', '-t', 'apiservice/v1alpha.farm.example.com', '--steal'];
  devop.push('-p', `8443:${localPort}`, '--record', harFile);
  const step3 = ['npx', 'tsx', 'examples/farm-operator/src/main.ts', '--step', '3', '--port', String(localPort)];
  const env = { ...process.env, ...agentImageEnv(), KUBECONFIG: kubeconfig, CI: 'true' };
  return new LocalProcess(process.execPath, [...devop, '--', ...step3], env);
}
