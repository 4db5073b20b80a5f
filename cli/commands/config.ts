// Registers `devop config` on the program (being built).
import type { Command } from 'commander';

export function registerConfigCommand(program: Command): void {
  void program;
}
