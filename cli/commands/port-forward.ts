// Registers `devop port-forward` on the program (being built).
import type { Command } from 'commander';

export function registerPortForwardCommand(program: Command): void {
  void program;
}
