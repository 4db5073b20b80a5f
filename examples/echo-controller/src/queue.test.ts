// The work queue: dedup, one reconcile at a time per key, re-run when changed mid-reconcile, retries with backoff.
import { describe, expect, it } from 'vitest';
import { WorkQueue } from './queue.js';

async function until(cond: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('WorkQueue', () => {
  it('processes a key added many times before a worker gets to it once', async () => {
    const q = new WorkQueue();
    const seen: string[] = [];
    q.add('default/a');
    q.add('default/a');
    q.add('default/b');
    q.add('default/a');
    const running = q.run(async (key) => void seen.push(key));
    await until(() => seen.length === 2, 'two reconciles');
    q.stop();
    await running;
    expect(seen).toEqual(['default/a', 'default/b']);
  });

  it('never runs two reconciles of one key at once, even with several workers, and re-runs a key changed meanwhile', async () => {
    // Given a slow reconcile of key a with 3 workers
    const q = new WorkQueue();
    let active = 0;
    let maxActive = 0;
    let runs = 0;
    let release: () => void = () => undefined; // replaced by the blocked handler's resolve
    const running = q.run(async () => {
      active += 1;
      maxActive = Math.max(maxActive, active);
      runs += 1;
      if (runs === 1) await new Promise<void>((r) => (release = r));
      active -= 1;
    }, 3);
    q.add('ns/a');
    await until(() => runs === 1, 'the first reconcile to start');
    // When a is added again twice while its first reconcile is still running
    q.add('ns/a');
    q.add('ns/a');
    await new Promise((r) => setTimeout(r, 50));
    expect(runs).toBe(1);
    release();
    // Then it runs exactly once more, after the first one ended
    await until(() => runs === 2 && active === 0, 'the second reconcile');
    q.stop();
    await running;
    expect(maxActive).toBe(1);
    expect(runs).toBe(2);
  });

  it('retries a failing key with doubling delays and forgets the count on success', async () => {
    const errors: number[] = [];
    const q = new WorkQueue({ baseDelayMs: 20, maxDelayMs: 1000, onError: (_k, _e, delay) => errors.push(delay) });
    let attempts = 0;
    const running = q.run(async () => {
      attempts += 1;
      if (attempts <= 3) throw new Error(`conflict ${attempts}`);
    });
    q.add('ns/flaky');
    await until(() => attempts === 4, 'the fourth attempt');
    q.stop();
    await running;
    expect(errors).toEqual([20, 40, 80]);
    expect(q.retries('ns/flaky')).toBe(0);
  });

  it('caps the retry delay', async () => {
    const delays: number[] = [];
    const q = new WorkQueue({ baseDelayMs: 1, maxDelayMs: 4, onError: (_k, _e, d) => delays.push(d) });
    const running = q.run(async () => {
      throw new Error('down');
    });
    q.add('ns/down');
    await until(() => delays.length >= 5, 'five failures');
    q.stop();
    await running;
    expect(delays.slice(0, 5)).toEqual([1, 2, 4, 4, 4]);
  });
});
