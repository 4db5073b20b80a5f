// The commands' flags, made from the options table: each command names the options it takes (shared groups such as
// CONNECTION_OPTIONS spread in) and may reword an option's help line where it means something narrower there.
import { Option, type Command } from 'commander';
import { EXEC_HELP_GROUPS, EXEC_OPTIONS, OPTIONS, type OptionName, type OptionSpec } from './options.js';

/** An option by name, or [name, help line for this command]. */
export type OptionUse = OptionName | readonly [OptionName, string];

/** The option names of a list of uses (for FlagValues). */
export type NamesOf<U extends readonly OptionUse[]> = U[number] extends infer E
  ? E extends readonly [infer N extends OptionName, string]
    ? N
    : Extract<E, OptionName>
  : never;

const collect = (value: string, previous: string[] = []): string[] => [...previous, value];

/** The commander Option of a table entry. A keyed flag has no default: unset, devop.json's value stands. */
export function optionFor(use: OptionUse): Option {
  const [name, help] = typeof use === 'string' ? [use, undefined] : use;
  const spec: OptionSpec = OPTIONS[name];
  if (spec.flags === undefined) throw new Error(`option ${name} has no flag`);
  const option = new Option(spec.flags, help ?? spec.help);
  if (spec.repeatable) option.argParser(collect);
  if (spec.choices) option.choices(spec.choices);
  if (spec.key === undefined && spec.default !== undefined) option.default(spec.default);
  return option;
}

export function addOptions(command: Command, uses: readonly OptionUse[]): Command {
  for (const use of uses) command.addOption(optionFor(use));
  return command;
}

/** The flags of `devop exec`, by help group (target and mode first), each group in table order. */
export function addExecOptions(command: Command): Command {
  for (const [group, heading] of Object.entries(EXEC_HELP_GROUPS)) {
    command.optionsGroup(heading);
    for (const name of EXEC_OPTIONS) if (OPTIONS[name].group === group) command.addOption(optionFor(name));
  }
  return command;
}

/**
 * The command's flag values, a keyed flag's only when typed on the command line: commander gives `--no-flush` a
 * default of true, which would otherwise win over devop.json's `incoming.flush: false`.
 */
export function givenFlags<T extends object>(command: Command): T {
  const values: Record<string, unknown> = { ...command.opts() };
  for (const name of Object.keys(values)) {
    const spec: OptionSpec | undefined = (OPTIONS as Readonly<Record<string, OptionSpec>>)[name];
    if ((spec?.key ?? spec?.sets) !== undefined && command.getOptionValueSource(name) !== 'cli') delete values[name];
  }
  return values as T;
}
