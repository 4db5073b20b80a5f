// OpenSSH local forwarding for the tunnel benchmark: a throw-away key pair and an sshd on a loopback port (own config
// in a temp dir), and `ssh -N -L` in front of a target port; stop() kills both and removes the temp dir.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync, mkdirSync, existsSync, copyFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../testkit/sockets.js';

export interface SshForward {
  /** The loopback port `ssh -L` listens on; connections there reach the target port through sshd. */
  localPort: number;
  stop(): Promise<void>;
}

const READY_DEADLINE_MS = 20_000;

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    sock.once('connect', () => {
      sock.destroy();
      resolve(true);
    });
    sock.once('error', () => resolve(false));
  });
}

async function waitForListener(what: string, proc: ChildProcess, port: number): Promise<void> {
  const deadline = Date.now() + READY_DEADLINE_MS;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) throw new Error(`${what} exited with code ${proc.exitCode}`);
    if (await canConnect(port)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${what} did not listen on 127.0.0.1:${port} within ${READY_DEADLINE_MS / 1000} s`);
}

function killAndWait(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    proc.once('exit', () => resolve());
    proc.kill('SIGTERM');
    setTimeout(() => proc.kill('SIGKILL'), 2000).unref();
  });
}

/**
 * Starts sshd + `ssh -N -L` so that 127.0.0.1:<localPort> forwards to 127.0.0.1:<targetPort>, with `cipher` (`ssh -c`)
 * when given, else OpenSSH's default choice.
 */
export async function startSshForward(targetPort: number, cipher?: string): Promise<SshForward> {
  const dir = mkdtempSync(join(tmpdir(), 'devop-bench-ssh-'));
  const procs: ChildProcess[] = [];
  const stop = async (): Promise<void> => {
    await Promise.all(procs.map(killAndWait));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const user = userInfo().username;
    execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(dir, 'host_key')]);
    execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(dir, 'user_key')]);
    copyFileSync(join(dir, 'user_key.pub'), join(dir, 'authorized_keys'));
    // sshd refuses to start as root without its privilege-separation directory (Debian creates it only at boot).
    if (process.getuid?.() === 0 && !existsSync('/run/sshd')) mkdirSync('/run/sshd', { mode: 0o755 });
    const sshdPort = await freePort();
    writeFileSync(
      join(dir, 'sshd_config'),
      [
        `Port ${sshdPort}`,
        'ListenAddress 127.0.0.1',
        `HostKey ${join(dir, 'host_key')}`,
        `AuthorizedKeysFile ${join(dir, 'authorized_keys')}`,
        `PidFile ${join(dir, 'sshd.pid')}`,
        'PasswordAuthentication no',
        'KbdInteractiveAuthentication no',
        'PubkeyAuthentication yes',
        'PermitRootLogin prohibit-password',
        'StrictModes no',
        'UsePAM no',
        'AllowTcpForwarding yes',
        'LogLevel ERROR',
        '',
      ].join('\n'),
    );
    // sshd's stderr is kept quiet (it logs the readiness probe as a failed key exchange); shown only if it fails.
    const sshd = spawn('/usr/sbin/sshd', ['-D', '-e', '-f', join(dir, 'sshd_config')], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let sshdLog = '';
    sshd.stderr?.on('data', (d: Buffer) => {
      if (sshdLog.length < 10_000) sshdLog += d.toString();
    });
    procs.push(sshd);
    try {
      await waitForListener('sshd', sshd, sshdPort);
    } catch (err) {
      throw new Error(`${(err as Error).message}: ${sshdLog.trim()}`);
    }
    const localPort = await freePort();
    const ssh = spawn(
      'ssh',
      [
        '-N',
        '-L',
        `127.0.0.1:${localPort}:127.0.0.1:${targetPort}`,
        '-p',
        String(sshdPort),
        '-i',
        join(dir, 'user_key'),
        '-o',
        'StrictHostKeyChecking=no',
        '-o',
        `UserKnownHostsFile=${join(dir, 'known_hosts')}`,
        '-o',
        'BatchMode=yes',
        '-o',
        'ExitOnForwardFailure=yes',
        '-o',
        'LogLevel=ERROR',
        ...(cipher ? ['-c', cipher] : []),
        `${user}@127.0.0.1`,
      ],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
    procs.push(ssh);
    await waitForListener('ssh -L', ssh, localPort);
    return { localPort, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
