import * as assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';
import { fake } from './fake-vscode';
import { KernelReportPanels } from '../src/kernelReport';
import { KernelReport } from '../src/reportHtml';

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
