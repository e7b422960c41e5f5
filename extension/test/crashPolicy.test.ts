import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { CrashPolicy } from '../src/crashPolicy';

test('N crashes within the window: restart N-1 times, then give up once, then ignore', () => {
  let now = 0;
  const p = new CrashPolicy(5, 180_000, () => now);
  const seen = [];
  for (let i = 0; i < 8; i++) {
    now += 1000;
    seen.push(p.record());
  }
  assert.deepEqual(seen, ['restart', 'restart', 'restart', 'restart', 'give-up', 'ignore', 'ignore', 'ignore']);
  assert.equal(p.givenUp, true);
});

test('crashes spread wider than the window never give up', () => {
  let now = 0;
  const p = new CrashPolicy(3, 60_000, () => now);
  for (let i = 0; i < 20; i++) {
    now += 31_000; // at most 2 in any 60 s window
    assert.equal(p.record(), 'restart');
  }
  assert.equal(p.recent, 2);
});

test('reset (the user pressed Restart) counts afresh', () => {
  let now = 0;
  const p = new CrashPolicy(2, 60_000, () => now);
  assert.equal(p.record(), 'restart');
  assert.equal(p.record(), 'give-up');
  p.reset();
  now += 1;
  assert.equal(p.givenUp, false);
  assert.equal(p.record(), 'restart');
  assert.equal(p.record(), 'give-up');
});
