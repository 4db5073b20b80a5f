// CPU time a process has used so far, for the benches' "where the time goes" lines.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** Clock ticks per second, the unit of /proc's CPU times. */
export const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }));

/** CPU time (ms) a process has used so far, user and system, from /proc/PID/stat (fields 14 and 15). */
export function cpuMs(pid: number): { user: number; sys: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { user: (Number(fields[11]) * 1000) / CLK_TCK, sys: (Number(fields[12]) * 1000) / CLK_TCK };
}

/**
 * The whole machine's CPU time so far (ms, summed over its cores, from /proc/stat's first line): `busy` is user, nice,
 * system, irq, softirq and steal; `all` adds idle and iowait; `softirq` is irq and softirq, the packets' share that no
 * process is charged with. Every process counts, the bench's own included.
 */
export function machineCpuMs(): { busy: number; all: number; softirq: number } {
  const [, ...fields] = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0].trim().split(/\s+/);
  const [user, nice, system, idle, iowait, irq, softirq, steal] = fields.map((f) => (Number(f) * 1000) / CLK_TCK);
  const busy = user + nice + system + irq + softirq + steal;
  return { busy, all: busy + idle + iowait, softirq: irq + softirq };
}
