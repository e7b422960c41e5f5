import * as assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';
import { fake } from './fake-vscode';
import { AgentRuns } from '../src/agentRuns';

beforeEach(() => fake.reset());
const tick = async () => { for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r)); };

test('one cancellable progress per document; the server\'s messages fill it; Cancel reaches the server', async () => {
  const cancelled: string[] = [];
  const runs = new AgentRuns(async (uri) => { cancelled.push(uri); });
  runs.begin('file:///ws/k.py', 'k.py');
  runs.begin('file:///ws/k.py', 'k.py');
  await tick();
  assert.equal(fake.progressOpen, 1);
  assert.deepEqual(fake.progress, ['begin NKI Agent: fixing k.py (cancellable)']);
  runs.progress({ uri: 'file:///ws/k.py', message: 'turn 1: asking rules · $0.000, 0 tokens' });
  assert.equal(fake.progress.at(-1), 'turn 1: asking rules · $0.000, 0 tokens');
  fake.cancels[0]();
  assert.deepEqual(cancelled, ['file:///ws/k.py']);
  runs.end('file:///ws/k.py'); // the preview opened
  await tick();
  assert.equal(fake.progressOpen, 0);
  assert.deepEqual(runs.running, []);
});

test('results end the progress and add up the spend; a run the server started itself (Rerun) gets a progress too', async () => {
  const runs = new AgentRuns(async () => undefined);
  const seen: number[] = [];
  runs.onDidChangeSpend((s) => seen.push(s.runs));
  runs.progress({ uri: 'file:///ws/a.py', message: 'turn 1' });
  await tick();
  assert.equal(fake.progressOpen, 1);
  runs.result({ uri: 'file:///ws/a.py', dollars: 0.0125, tokens: 1200 });
  runs.result({ uri: 'file:///ws/b.py', dollars: 0.5, tokens: 300 });
  runs.result({ uri: 'file:///ws/c.py', dollars: Number.NaN, tokens: -4 }); // hostile figures count as nothing
  runs.result({ bogus: true } as never);
  await tick();
  assert.equal(fake.progressOpen, 0);
  assert.deepEqual(runs.spend, { dollars: 0.5125, tokens: 1500, runs: 3 });
  assert.deepEqual(seen, [1, 2, 3]);
  runs.begin('file:///ws/d.py', 'd.py');
  runs.endAll();
  await tick();
  assert.equal(fake.progressOpen, 0);
});
