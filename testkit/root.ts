// Guards for suites that need root (network namespaces, iptables, cgroups): they fail loudly rather than pass unrun.
export function isRoot(): boolean {
  return typeof process.getuid === 'function' && process.getuid() === 0;
}

/**
 * Call at the top of a suite that needs root. Throws (so the suite fails) unless DEVOP_SKIP_ROOT_TESTS=1 asks for a
 * skip.
 */
export function requireRoot(suite: string): boolean {
  if (isRoot()) return true;
  if (process.env.DEVOP_SKIP_ROOT_TESTS === '1') {
    console.warn(`SKIPPED ${suite}: needs root (network namespaces, iptables); DEVOP_SKIP_ROOT_TESTS=1 was set`);
    return false;
  }
  throw new Error(
    `${suite} needs root (network namespaces, iptables, cgroups). Run the tests as root, or set ` +
      `DEVOP_SKIP_ROOT_TESTS=1 to report them skipped.`,
  );
}
