// The options table: every entry is complete and consistent, the commands take their flags only from it, and the
// modules that `devop --help` loads stay free of zod (they import nothing but commander and the table).
import { readdirSync, readFileSync } from 'node:fs';
import { Command, Option } from 'commander';
import { describe, expect, it } from 'vitest';
import { addExecOptions, addOptions } from './commander.js';
import { configSection, EXEC_HELP_GROUPS, EXEC_OPTIONS, OPTIONS, type OptionSpec } from './options.js';

const entries = Object.entries(OPTIONS) as [string, OptionSpec][];
const source = (path: string): string => readFileSync(new URL(path, import.meta.url), 'utf8');

describe('the options table', () => {
  it('names each entry as commander names its flag; every flag has a help line, every key a doc sentence', () => {
    for (const [name, spec] of entries) {
      expect(spec.flags ?? spec.key, name).toBeDefined();
      if (spec.flags !== undefined) {
        expect(new Option(spec.flags).attributeName(), spec.flags).toBe(name);
        expect(spec.help, name).toBeTruthy();
      }
      if (spec.key !== undefined) expect(spec.doc, name).toBeTruthy();
      if (spec.type === 'enum') expect(spec.values ?? spec.choices, name).toBeDefined();
    }
  });

  it('has each key, env variable and flag once, and a section entry above every nested key', () => {
    const once = (values: (string | undefined)[]): void => {
      const given = values.filter((v): v is string => v !== undefined);
      expect(new Set(given).size, given.join(' ')).toBe(given.length);
    };
    once(entries.map(([, spec]) => spec.key));
    once(entries.map(([, spec]) => spec.env));
    once(entries.flatMap(([, spec]) => spec.flags?.match(/-[\w-]+/g) ?? []));
    for (const [, spec] of entries) {
      if (spec.env !== undefined) expect(spec.env).toMatch(/^DEVOP_[A-Z_]+$/);
      const segments = (spec.key ?? spec.sets ?? '').split('.');
      for (let i = 1; i < segments.length; i += 1) {
        expect(configSection(segments.slice(0, i).join('.')), spec.key).toBeDefined();
      }
    }
  });

  it('gives exec every grouped flag, help groups in order, and other commands exactly the flags they name', () => {
    const exec = addExecOptions(new Command('exec'));
    expect(exec.options.map((o) => o.attributeName()).sort()).toEqual([...EXEC_OPTIONS].sort());
    const headings = [...new Set(exec.options.map((o) => o.helpGroupHeading))];
    expect(headings).toEqual(Object.values(EXEC_HELP_GROUPS));
    const ls = addOptions(new Command('ls'), ['context', ['namespace', 'namespace of ls']]);
    expect(ls.options.map((o) => [o.long, o.description])).toEqual([
      ['--context', OPTIONS.context.help],
      ['--namespace', 'namespace of ls'],
    ]);
  });

  it("gives a flag without a devop.json key its default, a keyed flag none (unset, the file's value stands)", () => {
    const exec = addExecOptions(new Command('exec')).exitOverride();
    exec.parse([], { from: 'user' });
    expect(exec.opts()).toEqual({
      output: 'auto',
      flush: true,
      outgoing: true,
      proxyEnv: true,
      nodePreload: true,
      nativePreload: true,
    });
    expect(exec.getOptionValueSource('flush')).toBe('default');
  });
});

describe('the commands', () => {
  it('define no flag of their own: every flag comes from the options table', () => {
    const dir = new URL('../commands/', import.meta.url);
    for (const file of readdirSync(dir).filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'))) {
      const text = readFileSync(new URL(file, dir), 'utf8');
      expect(text, file).not.toMatch(/\.option\(|new Option\(/);
    }
  });

  it('load no zod to define their flags: the table imports only types, the builder commander and the table', () => {
    const runtimeImports = (text: string): string[] =>
      [...text.matchAll(/^import (?!type )[^;]*? from '([^']+)';/gms)].map((m) => m[1]);
    expect(runtimeImports(source('./options.ts'))).toEqual([]);
    expect(runtimeImports(source('./commander.ts'))).toEqual(['commander', './options.js']);
  });
});
