import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { ServerProgress } from '../src/serverProgress';
import { statusView } from '../src/statusBar';
import { filterHints, enabledKinds, inlayKind, INLAY_KINDS } from '../src/inlayKinds';

test('progress: begin / report / end per token, the original handler still called, cleared on a stop', () => {
  const p = new ServerProgress();
  let changes = 0;
  p.onDidChange(() => { changes += 1; });
  const seen: unknown[] = [];
  const handler = p.tap('t1', (v: unknown) => seen.push(v));
  handler({ kind: 'begin', title: 'NKI: verifying', message: '/ws/k.py', cancellable: true });
  assert.deepEqual(p.active, [{ title: 'NKI: verifying', message: '/ws/k.py' }]);
  p.update(7, { kind: 'begin', title: 'NKI: remote run' });
  handler({ kind: 'report', message: 'seed 2/4' });
  assert.deepEqual(p.active.map((a) => a.message), ['seed 2/4', undefined]);
  p.update('unknown', { kind: 'report', message: 'x' }); // a token never begun: ignored
  p.update('t1', [{ partial: 'result' }]); // not work-done progress
  handler({ kind: 'end', message: 'done' });
  assert.deepEqual(p.active.map((a) => a.title), ['NKI: remote run']);
  assert.equal(seen.length, 3);
  assert.equal(changes, 4);
  p.clear(); // the server restarted or crashed
  assert.deepEqual(p.active, []);
  assert.equal(changes, 5);
  p.clear();
  assert.equal(changes, 5);
});

test('status: a spinner while the server reports progress, its title leading the tooltip', () => {
  const busy = statusView('trn2', { kind: 'local' }, 'running', undefined, [{ title: 'NKI: verifying', message: '/ws/k.py' }]);
  assert.equal(busy.text, '$(sync~spin) NKI trn2 · local');
  assert.match(busy.tooltip, /^NKI: verifying — \/ws\/k\.py\nNKI Agent — target: trn2/);
  const idle = statusView('trn2', { kind: 'local' }, 'running', undefined, []);
  assert.equal(idle.text, '$(circuit-board) NKI trn2 · local');
  assert.doesNotMatch(idle.tooltip, /verifying/);
  // a crashed server shows its warning, never a stale spinner
  assert.match(statusView('trn2', { kind: 'local' }, 'crashed', undefined, [{ title: 'NKI: verifying' }]).text, /^\$\(warning\)/);
});

test('inlay kinds: the server data marker wins, else the LSP kind; disabled kinds are dropped', () => {
  assert.equal(inlayKind({ kind: 1 }), 'shapes');
  assert.equal(inlayKind({ kind: 2 }), 'tripCounts');
  assert.equal(inlayKind({}), 'estimates');
  assert.equal(inlayKind({ kind: 1, data: { kind: 'cost' } }), 'estimates');
  assert.equal(inlayKind({ data: { kind: 'parameter' } }), 'tripCounts');
  assert.equal(inlayKind({ kind: 2, data: { kind: 'other' } }), 'tripCounts');
  const hints = [{ kind: 1, label: ': (128, 512) float32 sbuf' }, { kind: 2, label: ' ×4' }, { label: '≈ 41 % · DMA' }];
  const settings = new Map<string, unknown>([['inlayHints.shapes', false]]);
  const on = enabledKinds((k) => settings.get(k));
  assert.deepEqual([...on].sort(), ['estimates', 'tripCounts']);
  assert.deepEqual(filterHints(hints, on)?.map((h) => h.label), [' ×4', '≈ 41 % · DMA']);
  settings.set('inlayHints.estimates', false);
  assert.deepEqual(filterHints(hints, enabledKinds((k) => settings.get(k)))?.map((h) => h.label), [' ×4']);
  const all = enabledKinds(() => undefined); // defaults: every kind on
  assert.equal(all.size, INLAY_KINDS.length);
  assert.equal(filterHints(hints, all), hints);
  assert.equal(filterHints(null, on), null);
});

test('inlay kinds: every toggle is declared in package.json, boolean, default true, described', async () => {
  const { readFileSync } = await import('node:fs');
  const manifest = JSON.parse(readFileSync(process.env.NKI_AGENT_MANIFEST ?? 'package.json', 'utf8'));
  const props = manifest.contributes.configuration.properties;
  for (const k of INLAY_KINDS) {
    const entry = props[`nkiAgent.inlayHints.${k}`];
    assert.ok(entry, k);
    assert.equal(entry.type, 'boolean');
    assert.equal(entry.default, true);
    assert.ok(entry.description.length > 20, k);
  }
});
