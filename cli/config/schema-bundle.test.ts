// What the devop.json schema (cli/config/schema.ts) puts into the CLI bundle: zod's code it uses and its English
// messages, not zod's other locales (all of them come along when the `z` namespace is imported as a value; they were
// 0.3 MB that `devop exec` compiled at every start).
import { build } from 'esbuild';
import { describe, expect, it } from 'vitest';
import { common } from '../../scripts/build-options.mjs';

describe('the devop.json schema in the bundle', () => {
  it("carries zod's English messages and none of its other locales", async () => {
    // Given the schema's module bundled with the options every devop bundle uses
    const result = await build({
      ...common,
      entryPoints: ['cli/config/schema.ts'],
      write: false,
      sourcemap: false,
      metafile: true,
      outfile: 'schema.js',
    });
    // When we weigh what each of zod's locales put into it
    const locales = Object.entries(result.metafile.inputs)
      .map(([input]) => input.match(/node_modules\/zod\/v4\/locales\/([^/]+)\.js$/)?.[1])
      .filter((name): name is string => name !== undefined && name !== 'index');
    const output = Object.values(result.metafile.outputs)[0];
    const bytesOf = (name: string): number =>
      output.inputs[`node_modules/zod/v4/locales/${name}.js`]?.bytesInOutput ?? 0;
    // Then English is there and every other locale adds nothing
    expect(bytesOf('en')).toBeGreaterThan(0);
    expect(locales.filter((name) => name !== 'en' && bytesOf(name) > 0)).toEqual([]);
  });
});
