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
