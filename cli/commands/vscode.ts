// Registers `devop vscode` on the program (being built).
import type { Command } from 'commander';

export function registerVscodeCommand(program: Command): void {
  void program;
}
