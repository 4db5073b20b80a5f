// CPU time a process has used so far, for the benches' "where the time goes" lines.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }));

/** CPU time (ms) a process has used so far, user and system, from /proc/PID/stat (fields 14 and 15). */
export function cpuMs(pid: number): { user: number; sys: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { user: (Number(fields[11]) * 1000) / CLK_TCK, sys: (Number(fields[12]) * 1000) / CLK_TCK };
}
