import * as assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';
import { fake } from './fake-vscode';
import { KernelReportPanels } from '../src/kernelReport';
import { KernelReport, RunEntry } from '../src/reportHtml';

beforeEach(() => fake.reset());

const report = (version: number): KernelReport => ({ uri: 'file:///ws/k.py', path: '/ws/k.py', version, task: '/ws/task.py',
  runs: [], timeline_svg: '', timeline_of: null, mismatch_of: null });

test('one panel per document, scripts off, redrawn on show, on refresh and when it comes back into view', async () => {
  const asked: string[] = [];
  let version = 1;
  const panels = new KernelReportPanels(async (uri, timeline) => { asked.push(`${uri} ${timeline}`); return report(version); });
  await panels.show('file:///ws/k.py');
  assert.equal(fake.panels.length, 1);
  const panel = fake.panels[0];
  assert.equal(panel.options.enableScripts, false);
  assert.equal(panel.options.enableCommandUris, false);
  assert.deepEqual(panel.options.localResourceRoots, []);
  assert.equal(panel.title, 'NKI report: k.py');
  assert.match(panel.webview.html, /version 1/);
  version = 2;
  await panels.show('file:///ws/k.py');
  assert.equal(fake.panels.length, 1);
  assert.equal(panel.revealed, 1);
  assert.match(panel.webview.html, /version 2/);
  version = 3;
  panel.show();
  await new Promise((r) => setImmediate(r));
  assert.match(panel.webview.html, /version 3/);
  await panels.refresh('file:///ws/other.py'); // no panel: nothing asked
  // the command asks for the timeline; a redraw does not (it would be a sandboxed run per redraw)
  assert.deepEqual(asked, ['file:///ws/k.py true', 'file:///ws/k.py true', 'file:///ws/k.py false']);
  panel.dispose();
  assert.deepEqual(panels.open, []);
});

test('a server error is said in the panel, escaped', async () => {
  const panels = new KernelReportPanels(async () => { throw new Error('<b>boom</b>'); });
  await panels.show('file:///ws/k.py');
  assert.match(fake.panels[0].webview.html, /could not make the report: &#60;b&#62;boom/);
  const down = new KernelReportPanels(async () => 'the language server is not running (crashed)');
  await down.show('file:///ws/j.py');
  assert.match(fake.panels[1].webview.html, /not running \(crashed\)/);
});

const run = (kind: string, version: number): RunEntry => ({
  kind, revision: version, version, verdict: 'correct', correct: true, target: 'trn1', backend: 'simulator', runner: 'local',
  sandbox: 'bwrap', via: 'task', max_abs_error: 0, max_rel_error: 0, mismatches: 0, elements: 64, atol: 1e-5, rtol: 1e-3, codes: [],
  seeds: [], measured: null, estimated: null, seconds: 1 });

test('a closed source keeps the last report and says so; opening it again redraws from the server', async () => {
  const uri = 'file:///ws/k.py';
  let open = true;
  let asked = 0;
  let reply: KernelReport | string = { ...report(4), runs: [run('verify', 4)] };
  const panels = new KernelReportPanels(async () => { asked += 1; return reply; }, () => open);
  await panels.show(uri);
  assert.match(fake.panels[0].webview.html, /version 4/);
  // the preview tab is replaced: the document closes, the page keeps its content with a note, the server is not asked
  open = false;
  await panels.reconcile();
  const html = fake.panels[0].webview.html;
  assert.match(html, /version 4/);
  assert.match(html, /source file is closed/);
  assert.doesNotMatch(html, /ValueError|could not make the report/);
  fake.panels[0].show(); // back into view while closed
  await new Promise((r) => setImmediate(r));
  assert.equal(asked, 1);
  assert.match(fake.panels[0].webview.html, /source file is closed/);
  // a refresh racing the close: the server's "needs an open document" error keeps the last content too
  open = true;
  reply = 'ValueError: nki/kernelReport needs the URI of an open document';
  open = false;
  await panels.refresh(uri);
  assert.match(fake.panels[0].webview.html, /version 4/);
  // opened again: the server forgot the runs, so the earlier ones stay, labelled; a new run replaces them
  open = true;
  reply = report(1);
  await panels.reconcile();
  assert.match(fake.panels[0].webview.html, /version 4/);
  assert.match(fake.panels[0].webview.html, /closed and opened again/);
  reply = { ...report(2), runs: [run('simulate', 2)] };
  await panels.refresh(uri);
  assert.match(fake.panels[0].webview.html, /version 2/);
  assert.doesNotMatch(fake.panels[0].webview.html, /closed/);
  // a redraw asked while the source was open, answered after it closed: the note stays
  reply = { ...report(3), runs: [run('verify', 3)] };
  const slow = new KernelReportPanels(async () => { open = false; return reply; }, () => open);
  open = true;
  await slow.show('file:///ws/slow.py');
  assert.match(fake.panels[1].webview.html, /source file is closed/);
  open = true;
  const before = asked;
  await panels.reconcile(); // open and not marked closed: nothing asked
  assert.equal(asked, before);
});
