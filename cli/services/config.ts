// `devop config`: validates a devop.json (every problem on its own line: key path, value, what is accepted) and gives
// the JSON Schema editors read. Takes plain options, returns results; the command prints them.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { configProblems, formatConfigProblem, readConfigText } from '../config/schema.js';
import { UserError } from '../../shared/errors.js';

export const SCHEMA_FILE_NAME = 'devop.schema.json';

export interface ConfigValidation {
  file: string;
  /** One line per problem: `<file>: <key.path> is <value> — accepted: <what>`; empty when the file is valid. */
  problems: string[];
}

/**
 * Reads and checks a devop.json; a missing or unreadable file is a UserError (not a validation problem). `named`: the
 * user passed this path (then a missing file means a wrong path), rather than devop looking for ./devop.json.
 */
export function validateConfigFile(path: string, named: boolean): ConfigValidation {
  const missingHint = named
    ? 'check the path (it is read relative to the current folder)'
    : 'pass the file with -f/--config, or run devop in the folder that holds devop.json';
  const text = readConfigText(path, missingHint);
  return validateConfigText(text, path);
}

export function validateConfigText(text: string, file: string): ConfigValidation {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return {
      file,
      problems: [
        `${file}: not valid JSON (${jsonErrorWhere(text, err as Error)}) — accepted: strict JSON (no comments, no ` +
          `trailing commas)`,
      ],
    };
  }
  return { file, problems: configProblems(value).map((problem) => formatConfigProblem(problem, file)) };
}

/** "line 3, column 14: Unexpected token …" from JSON.parse's "at position N". */
function jsonErrorWhere(text: string, err: Error): string {
  const match = /position (\d+)/.exec(err.message);
  const reason = err.message.replace(/ in JSON at position \d+.*$/, '').replace(/^JSON\.parse: /, '');
  if (!match) return reason;
  const before = text.slice(0, Number(match[1]));
  const line = before.split('\n').length;
  const column = before.length - before.lastIndexOf('\n');
  return `line ${line}, column ${column}: ${reason}`;
}

/** The devop package folder (where package.json and devop.schema.json are), from this module's location. */
export function devopPackageRoot(from: string = fileURLToPath(import.meta.url)): string {
  let dir = dirname(from);
  for (let i = 0; i < 6; i += 1) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'bin', 'devop.js'))) return dir;
    dir = dirname(dir);
  }
  throw new UserError('cannot find the devop package folder (package.json beside bin/devop.js)', 'reinstall devop');
}

/** The committed devop.schema.json of the running devop (the one editors should read). */
export function schemaFilePath(root: string = devopPackageRoot()): string {
  const candidates = [join(root, SCHEMA_FILE_NAME), join(root, 'shared', SCHEMA_FILE_NAME)];
  const found = candidates.find((candidate) => existsSync(candidate));
  if (!found)
    throw new UserError(
      `${SCHEMA_FILE_NAME} is missing from ${root}`,
      'reinstall devop (the schema is part of the package)',
    );
  return resolve(found);
}

/** The JSON Schema of devop.json, as committed (so what `devop config schema` prints is what editors read). */
export function configSchemaText(): string {
  const text = readFileSync(schemaFilePath(), 'utf8');
  return text.endsWith('\n') ? text : `${text}\n`;
}
