// The bundles' `util` (scripts/shims/util.cjs) extends as Node's util._extend() does. That the shadow proxy, its
// caller, prints no warning is checked on the built CLI (test/examples/echo-controller.test.ts).
import { createRequire } from 'node:module';
import util from 'node:util';
import { describe, expect, it } from 'vitest';

type Extend = (target: object, source: unknown) => object;
const shim = createRequire(import.meta.url)('./util.cjs') as typeof util & { _extend: Extend };
const nodeExtend = (util as unknown as { _extend: Extend })._extend;

describe('the util shim', () => {
  it('_extend() gives what util._extend() gives', () => {
    const inherited = Object.create({ fromProto: 1 }) as Record<string, unknown>;
    inherited.own = 2;
    const hidden = Object.defineProperty({ shown: 1 }, 'hidden', { value: 2, enumerable: false });
    const sources: unknown[] = [{ a: 1, b: { c: 2 } }, inherited, hidden, ['x', 'y'], null, undefined, 'str', 42];
    for (const source of sources) {
      const target = () => ({ a: 0, keep: true });
      expect(shim._extend(target(), source)).toEqual(nodeExtend(target(), source));
    }
    const same = {};
    expect(shim._extend(same, { a: 1 })).toBe(same);
  });

  it('keeps the rest of Node util module', () => {
    expect(shim.inspect).toBe(util.inspect);
    expect(shim.promisify).toBe(util.promisify);
    expect(shim.types).toBe(util.types);
  });
});
