// Whether this machine has a C compiler: the suites of the bench's C references are reported as skipped without one.
import { execFileSync } from 'node:child_process';

export const hasCc = ((): boolean => {
  try {
    execFileSync('cc', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
