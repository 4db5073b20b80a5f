// Test runner configuration: unit tests next to the code, system suites (root, netns, stand-in) under test/.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: [
      'shared/**/*.test.ts',
      'agent/**/*.test.ts',
      'cli/**/*.test.{ts,tsx}',
      'examples/**/*.test.ts',
      'test/**/*.test.{ts,tsx}',
      'scripts/**/*.test.ts',
      'bench/**/*.test.ts',
    ],
    // System suites share the host's iptables and cgroups; running files one at a time keeps their timing honest on 2
    // cores.
    fileParallelism: false,
    globalSetup: ['test/helpers/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    reporters: ['default'],
  },
});
