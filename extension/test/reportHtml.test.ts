import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { KernelReport, RunEntry, csp, escapeHtml, heatmapSvg, latencyChart, makeNonce, mismatchSection, renderReport } from '../src/reportHtml';

const HOSTILE = '<script>alert(1)</script>"\'&`';

function run(over: Partial<RunEntry>): RunEntry {
  return {
    kind: 'verify', revision: 1, version: 1, verdict: 'correct', correct: true, target: 'trn1', backend: 'simulator',
    runner: 'local', sandbox: 'bwrap', via: 'task', max_abs_error: 0, max_rel_error: 0, mismatches: 0, elements: 64,
    atol: 1e-5, rtol: 1e-3, codes: [], seeds: [], measured: null, estimated: null, seconds: 1, ...over,
  };
}

const failing = run({
  version: 3, verdict: 'incorrect', correct: false, mismatches: 40, max_abs_error: null, codes: [HOSTILE],
  estimated: { microseconds: 6.5, source: 'cost model', target: 'trn1', detail: 'VectorE-bound' },
  seeds: [
    { seed: 0, hidden: false, correct: false, max_abs_error: 2, max_rel_error: 1, mismatches: 32, elements: 64,
      first_mismatch: { output: 0, index: [130, 5], partition: 130, free: [5], got: 1, expected: 3, line: 12,
        heatmap: { partitions: 256, free: 8, row_starts: [0, 128], col_starts: [0, 4], counts: [[0, 0], [2, 30]] } }, message: HOSTILE },
    { seed: null, hidden: true, correct: true, max_abs_error: 0, max_rel_error: 0, mismatches: 0, elements: 64, first_mismatch: null, message: '' },
  ],
});
const REPORT: KernelReport = {
  uri: 'file:///ws/k.py', path: `/ws/${HOSTILE}.py`, version: 3, task: HOSTILE,
  runs: [failing, run({ kind: 'remote', runner: 'http://trn:8765', measured: { microseconds: 7.25, source: 'nki.benchmark', target: 'trn1', detail: 'p99 8.0 µs' } }),
    run({ kind: 'simulate', verdict: 'simulated', correct: null, estimated: { microseconds: 5, source: 'cost model', target: 'trn1', detail: 'DMA-bound' } })],
  timeline_svg: '<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"><title>&lt;script&gt;</title></svg>',
  timeline_of: 1, mismatch_of: 0,
};

test('every string of the model is escaped; the page has no script and a strict CSP with a nonce', () => {
  const nonce = makeNonce();
  assert.match(nonce, /^[A-Za-z0-9]{16,}$/);
  assert.notEqual(nonce, makeNonce());
  const html = renderReport(REPORT, nonce);
  assert.ok(!html.includes('<script'), 'no script element, not even the hostile one');
  assert.ok(!html.includes(HOSTILE));
  assert.ok(html.includes(escapeHtml(HOSTILE)));
  const policy = csp(nonce);
  assert.ok(html.includes(escapeHtml(policy)));
  assert.match(policy, /default-src 'none'/);
  assert.match(policy, /script-src 'none'/);
  assert.ok(!/unsafe-|https?:/.test(policy), policy);
  assert.ok(html.includes(`<style nonce="${nonce}">`));
  assert.ok(!/ style=/.test(html), 'no style attributes (the CSP would block them)');
  assert.ok(!/(src|href)="https?:/.test(html), 'no remote resources');
  assert.equal(escapeHtml('<a href="x">\'&`'), '&#60;a href=&#34;x&#34;&#62;&#39;&#38;&#96;');
});

test('measured and estimated latency are separate series, labelled apart', () => {
  const chart = latencyChart(REPORT.runs);
  assert.match(chart, /● measured<\/span> \(a device/);
  assert.match(chart, /◇ estimated<\/span> \(the cost model; never a measurement\)/);
  assert.equal((chart.match(/<circle [^>]*class="measured"/g) ?? []).length, 1);
  assert.equal((chart.match(/stroke-width="1.5" class="estimated"><title>/g) ?? []).length, 2);
  assert.match(chart, /7\.25 µs/);
  assert.match(chart, /≈ 6\.50 µs est\./);
  assert.match(latencyChart([]), /No latency yet/);
});

test('the timeline is a data: image; mismatches show per-seed shares and the first element on partition × free', () => {
  const html = renderReport(REPORT, 'n0nce');
  const b64 = Buffer.from(REPORT.timeline_svg, 'utf8').toString('base64');
  assert.ok(html.includes(`src="data:image/svg+xml;base64,${b64}"`));
  assert.match(html, /estimate of version 1 \(an earlier version\) — estimated, not measured/);
  const mm = mismatchSection(REPORT);
  assert.match(mm, /class="heat6">seed 0<br>50\.0 %/);
  assert.match(mm, /class="heat0">hidden seed/);
  assert.match(mm, /<td>130 \(tile 1, row 2\)<\/td><td><code>\[5\]<\/code><\/td><td>1\.00000<\/td><td>3\.00000<\/td><td>12<\/td>/);
  assert.match(mm, /Where output 0 differs \(seed 0; partition × free, 256 × 8 elements in bins\)/);
  assert.equal((mm.match(/<rect [^>]*fill="#c0392b"/g) ?? []).length, 4);
  assert.match(mm, /fill-opacity="0.04"><title>partitions 0–127, free 0–3: 0 of 512 differ/);
  assert.match(mm, /<title>partitions 128–255, free 4–7: 30 of 512 differ/);
  assert.match(mm, /<rect x="\d+" y="\d+" [^>]*stroke="currentColor" stroke-width="2"><title>the first mismatch/);
  assert.equal(heatmapSvg({ partitions: 1, free: 1, row_starts: [0, 1], col_starts: [0], counts: [[1]] }), ''); // malformed
  const empty = renderReport({ ...REPORT, runs: [], timeline_svg: '', timeline_of: null, mismatch_of: null }, 'n');
  assert.match(empty, /No verification yet/);
  assert.match(empty, /No engine timeline/);
  assert.match(empty, /No failing verification/);
});
