// `devop config validate` names every bad key with its value and what is accepted; `devop config schema` prints the
// committed JSON Schema. Runs the built CLI.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO_ROOT, runCli } from './helpers/cli.js';

const dir = mkdtempSync(join(tmpdir(), 'devop-ui-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('devop config validate', () => {
  it('prints one line per problem naming the key path, the value and what is accepted', async () => {
    // Given a devop.json with a bad mode, a bad port, an unknown key and a negative TTL
    const file = join(dir, 'bad.json');
    writeFileSync(
      file,
      JSON.stringify({
        target: 'deploy/echo',
        incoming: { mode: 'stael', ports: [3000, 70000] },
        agent: { ttlSeconds: -5 },
        colour: 'blue',
      }),
    );
    // When it is validated
    const result = await runCli(['config', 'validate', '-f', file]);
    // Then it fails, and each problem is one line with key path, value and accepted values
    expect(result.code).toBe(1);
    const lines = result.stdout.trim().split('\n');
    expect(lines).toHaveLength(4);
    expect(lines).toContain(`${file}: incoming.mode is "stael" — accepted: "steal" | "mirror"`);
    expect(lines.find((line) => line.startsWith(`${file}: incoming.ports[1] is 70000 — accepted: `))).toMatch(
      /REMOTE\[:LOCAL\].*1-65535/,
    );
    expect(lines).toContain(`${file}: agent.ttlSeconds is -5 — accepted: a number >= 0`);
    expect(lines.find((line) => line.startsWith(`${file}: colour is not a devop.json key — accepted: `))).toContain(
      'target, namespace',
    );
    // And stderr sums it up with the fix
    expect(result.stderr).toContain(`devop: ${file} has 4 problems`);
  });

  it('says where a JSON syntax error is', async () => {
    // Given a file with a comment (devop.json is strict JSON)
    const file = join(dir, 'syntax.json');
    writeFileSync(file, '{\n  "target": "deploy/echo",\n  // steal it\n  "incoming": {}\n}\n');
    // When it is validated
    const result = await runCli(['config', 'validate', '-f', file]);
    // Then the one problem names the line and column
    expect(result.code).toBe(1);
    expect(result.stdout.trim()).toMatch(
      new RegExp(
        `^${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: not valid JSON \\(line 3, column 3: .*\\) — accepted: ` +
          `strict JSON`,
      ),
    );
  });

  it('accepts a valid file and a missing file is one line with the fix', async () => {
    // Given a valid devop.json
    const file = join(dir, 'devop.json');
    writeFileSync(
      file,
      JSON.stringify({ target: 'deploy/echo', incoming: { mode: 'steal', ports: [3000, '80:8080'] } }),
    );
    // When validated (found in the working directory by default)
    const ok = await runCli(['config', 'validate'], { cwd: dir });
    // Then it passes
    expect(ok.code).toBe(0);
    expect(ok.stdout).toBe('devop.json: valid\n');
    // When a file that does not exist is named
    const missing = await runCli(['config', 'validate', '-f', join(dir, 'nope.json')]);
    // Then one error line with a fix that fits: the file was passed, so check its path
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/nope\.json does not exist/);
    expect(missing.stderr).toMatch(/fix: check the path/);
    expect(missing.stderr).not.toMatch(/pass the file/);
    // When a file that does not exist is named as an argument
    const byArgument = await runCli(['config', 'validate', '/nonexistent.json']);
    // Then the same: the path is what to check
    expect(byArgument.code).toBe(1);
    expect(byArgument.stderr).toMatch(/\/nonexistent\.json does not exist — fix: check the path/);
    // When nothing is named and the folder has no devop.json
    const none = await runCli(['config', 'validate'], { cwd: tmpdir() });
    // Then the fix says how to name it
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/fix: pass the file with -f\/--config/);
  });

  it('takes the file as an argument as well as with -f', async () => {
    // Given a valid file and a bad one
    const good = join(dir, 'by-argument.json');
    writeFileSync(good, JSON.stringify({ target: 'deploy/echo' }));
    const bad = join(dir, 'bad-argument.json');
    writeFileSync(bad, JSON.stringify({ incoming: { mode: 'borrow' } }));
    // When each is named as an argument
    const ok = await runCli(['config', 'validate', good]);
    const problems = await runCli(['config', 'validate', bad]);
    // Then each is checked
    expect([ok.code, ok.stdout]).toEqual([0, `${good}: valid\n`]);
    expect(problems.code).toBe(1);
    expect(problems.stdout).toMatch(/incoming\.mode/);
    // When two different files are named, one each way
    const both = await runCli(['config', 'validate', good, '-f', bad]);
    // Then one line says to name one
    expect(both.code).toBe(1);
    expect(both.stderr).toMatch(/two files to check/);
  });
});

describe('devop config schema', () => {
  it('prints the committed devop.schema.json', async () => {
    // When the schema is printed
    const result = await runCli(['config', 'schema']);
    // Then it is the committed file, a JSON Schema of an object with the devop.json keys
    expect(result.code).toBe(0);
    expect(result.stdout).toBe(readFileSync(join(REPO_ROOT, 'devop.schema.json'), 'utf8').replace(/\n?$/, '\n'));
    const schema = JSON.parse(result.stdout) as { type: string; properties: Record<string, unknown> };
    expect(schema.type).toBe('object');
    expect(Object.keys(schema.properties)).toEqual(expect.arrayContaining(['target', 'incoming', 'env', 'agent']));
  });
});
