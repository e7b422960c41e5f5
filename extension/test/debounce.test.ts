import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { Debouncer } from '../src/debounce';
import { FakeClock } from './helpers';

test('a burst of triggers is one call after the last one, with every reason once', () => {
  const clock = new FakeClock();
  const calls: string[][] = [];
  const d = new Debouncer(1000, (r) => calls.push(r), clock);
  d.trigger('interpreter');
  clock.advance(600);
  d.trigger('secret');
  clock.advance(600);
  d.trigger('interpreter');
  clock.advance(999);
  assert.deepEqual(calls, []);
  assert.equal(d.pending, true);
  clock.advance(1);
  assert.deepEqual(calls, [['interpreter', 'secret']]);
  assert.equal(d.pending, false);
  assert.equal(clock.count, 0);
  clock.advance(10_000);
  assert.equal(calls.length, 1);
});

test('flush runs a pending call now; cancel drops it', () => {
  const clock = new FakeClock();
  const calls: string[][] = [];
  const d = new Debouncer(1000, (r) => calls.push(r), clock);
  d.flush();
  assert.equal(calls.length, 0);
  d.trigger('a');
  d.flush();
  assert.deepEqual(calls, [['a']]);
  d.trigger('b');
  d.cancel();
  clock.advance(5000);
  assert.deepEqual(calls, [['a']]);
  d.trigger('c');
  clock.advance(1000);
  assert.deepEqual(calls, [['a'], ['c']]);
});
