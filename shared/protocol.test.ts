// incomingOpen decides the stolen connection's header without zod: on headers generated from StreamOpen's own fields
// (valid values, wrong types, edges, extra keys, other kinds), it takes exactly those StreamOpen takes as `incoming`
// without `request`, and returns what StreamOpen returns.
import { describe, expect, it } from 'vitest';
import { StreamOpen, incomingOpen } from './protocol.js';
import { STREAM_OPEN_SAMPLES, prng } from '../testkit/protocol-fixtures.js';

/** The fields of StreamOpen's `incoming` option, read from the schema: a field added there is generated here too. */
function incomingFields(): string[] {
  type Def = {
    options: Array<{ _zod: { def: { shape: Record<string, { _zod: { def: { values?: unknown[] } } }> } } }>;
  };
  const { options } = (StreamOpen as unknown as { _zod: { def: Def } })._zod.def;
  const incoming = options.find((o) => o._zod.def.shape.kind._zod.def.values?.includes('incoming'));
  if (!incoming) throw new Error('StreamOpen has no incoming option');
  return Object.keys(incoming._zod.def.shape);
}

const { request } = STREAM_OPEN_SAMPLES.incoming as { request: unknown };
/** Values of every JSON type, valid for some field and not for others, with the edges of the int fields. */
const VALUES: unknown[] = [
  ...[0, 1, 2, 3000, 65535, 65536, -1, 1.5, 1e21, -0, 2 ** 53].map(Number),
  ...['', 'incoming', 'outgoing', 'file', 'steal', 'mirror', 'STEAL', '10.0.0.9', '8080-n12', 'x'.repeat(300)],
  true,
  false,
  null,
  [],
  ['steal'],
  {},
  request,
  { method: 'GET' },
];
const VALID: Record<string, unknown[]> = {
  kind: ['incoming'],
  port: [1, 3000, 65535],
  mode: ['steal', 'mirror'],
  remoteAddress: ['10.0.0.9', '', '::1'],
  remotePort: [0, 51234, 65535],
  answers: [true, false],
};

/** A JSON value near a valid `incoming` header: each field valid, absent, or any of VALUES; sometimes an extra key. */
function header(rand: () => number, fields: string[]): unknown {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)];
  const value: Record<string, unknown> = {};
  for (const field of fields) {
    const r = rand();
    if (r < 0.6 && VALID[field]) value[field] = pick(VALID[field]);
    else if (r < 0.75) continue;
    else value[field] = pick(VALUES);
  }
  if (rand() < 0.2) value[pick(['extra', 'kind2', '__proto__x'])] = pick(VALUES);
  return JSON.parse(JSON.stringify(value)); // JSON values only, as the mux gives it
}

describe('incomingOpen', () => {
  it('takes exactly what StreamOpen takes as an incoming header without request, and returns the same', () => {
    const fields = incomingFields();
    const rand = prng(19);
    let taken = 0;
    let refused = 0;
    for (let i = 0; i < 30_000; i++) {
      const value = header(rand, fields);
      const fast = incomingOpen(value);
      const parsed = StreamOpen.safeParse(value);
      const common = parsed.success && parsed.data.kind === 'incoming' && parsed.data.request === undefined;
      if (common) expect(fast).toStrictEqual(parsed.data);
      else expect(fast).toBeUndefined();
      if (fast) taken++;
      else refused++;
    }
    // Both sides of the line are exercised, not only one.
    expect(taken).toBeGreaterThan(1000);
    expect(refused).toBeGreaterThan(1000);
  });

  it('leaves other kinds and headers with a request to StreamOpen', () => {
    for (const open of Object.values(STREAM_OPEN_SAMPLES)) expect(incomingOpen(open)).toBeUndefined();
    expect(incomingOpen(null)).toBeUndefined();
    expect(incomingOpen('incoming')).toBeUndefined();
  });
});
