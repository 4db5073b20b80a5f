// Lines of source are at most 120 characters. Biome's formatter keeps code within that width, but it cannot break a
// long string or comment; this check covers those. A test's title line is left to the formatter, which keeps
// `it('…', async () => {` together whatever its length (as prettier does). Prints each long line as path:line and
// exits 1 when there is one.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const MAX = 120;
const TEST_TITLE = /^\s*(it|test|describe)(\.\w+)*(\([^)]*\))?\(\s*(['"`]).*\4,/;
const files = execFileSync('git', ['ls-files', '*.ts', '*.tsx', '*.js', '*.mjs'], { encoding: 'utf8' })
  .split('\n')
  .filter((file, i, all) => file && all.indexOf(file) === i); // a file mid-merge is listed once per stage
let long = 0;
for (const file of files) {
  readFileSync(file, 'utf8')
    .split('\n')
    .forEach((line, i) => {
      const length = [...line].length;
      if (length > MAX && !TEST_TITLE.test(line)) {
        long++;
        console.log(`${file}:${i + 1}: ${length} characters (at most ${MAX})`);
      }
    });
}
if (long > 0) {
  console.log(`${long} line(s) longer than ${MAX} characters: split the string or the comment`);
  process.exit(1);
}
