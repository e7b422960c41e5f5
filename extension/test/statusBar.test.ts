import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { statusView } from '../src/statusBar';

test('status: target and runner state', () => {
  const local = statusView('trn2', { kind: 'local' }, 'running');
  assert.equal(local.text, '$(circuit-board) NKI trn2 · local');
  assert.equal(local.warning, false);
  const remote = statusView('auto', { kind: 'remote', url: 'http://trn-host:8765', backend: 'neuron' }, 'running');
  assert.equal(remote.text, '$(circuit-board) NKI auto · trn-host:8765');
  assert.match(remote.tooltip, /http:\/\/trn-host:8765 \(neuron backend\)/);
  const down = statusView('trn1', { kind: 'unreachable', url: 'http://10.0.0.9:8765', reason: 'ECONNREFUSED' }, 'running');
  assert.equal(down.text, '$(circuit-board) NKI trn1 · 10.0.0.9:8765 unreachable');
  assert.equal(down.warning, true);
  assert.match(down.tooltip, /unreachable \(ECONNREFUSED\)/);
});

test('status: the server state shows when it is not running', () => {
  assert.match(statusView('trn1', { kind: 'local' }, 'crashed').text, /^\$\(warning\)/);
  assert.equal(statusView('trn1', { kind: 'local' }, 'needs-setup').warning, true);
  assert.match(statusView('trn1', { kind: 'local' }, 'starting').text, /sync~spin/);
});

test('status: the agent spend since the editor started, after the first run', () => {
  assert.doesNotMatch(statusView('trn1', { kind: 'local' }, 'running').text, /\$\d/);
  assert.match(statusView('trn1', { kind: 'local' }, 'running').tooltip, /Agent spend since the editor started: \$0\.0000, 0 tokens, 0 run\(s\)/);
  const v = statusView('trn1', { kind: 'local' }, 'running', { dollars: 0.01234, tokens: 12345, runs: 2 });
  assert.equal(v.text, '$(circuit-board) NKI trn1 · local · $0.0123');
  assert.match(v.tooltip, /\$0\.0123, 12,345 tokens, 2 run\(s\)/);
  assert.equal(statusView('trn1', { kind: 'local' }, 'running', { dollars: 3.456, tokens: 1, runs: 1 }).text.endsWith('· $3.46'), true);
});
