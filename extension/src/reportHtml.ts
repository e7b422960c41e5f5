// The kernel report's page, as pure functions of the server's `nki/kernelReport` model
// (server/handlers/kernel_report.py): verification history per run (correct / incorrect, error
// figures), latency history with measured and estimated points drawn and labelled apart, the cost
// model's engine timeline (the server's SVG, shown as a data: image so nothing in it can run), and the
// first mismatches of the newest failing verification. Plain HTML + inline CSS + inline SVG; no scripts
// at all; the Content Security Policy allows only the nonce'd style and data: images; every string
// from the model is HTML-escaped (kernel paths, messages and codes are the kernel's, hence hostile).
import { randomBytes } from 'crypto';

export interface Heatmap { partitions: number; free: number; row_starts: number[]; col_starts: number[]; counts: number[][] }
export interface FirstMismatch {
  output: number; index: number[]; partition: number; free: number[]; got: number | null; expected: number | null;
  line: number | null; heatmap?: Heatmap | null;
}
export interface SeedRow {
  seed: number | null; hidden: boolean; correct: boolean; max_abs_error: number | null; max_rel_error: number | null;
  mismatches: number; elements: number; first_mismatch: FirstMismatch | null; message: string;
}
export interface LatencyFigure { microseconds: number; source: string; target: string; detail: string }
export interface RunEntry {
  kind: string; revision: number; version: number; verdict: string; correct: boolean | null; target: string;
  backend: string; runner: string; sandbox: string; via: string; max_abs_error: number | null;
  max_rel_error: number | null; mismatches: number; elements: number; atol: number; rtol: number; codes: string[];
  seeds: SeedRow[]; measured: LatencyFigure | null; estimated: LatencyFigure | null; seconds: number;
}
export interface KernelReport {
  uri: string; path: string; version: number; task: string; runs: RunEntry[]; timeline_svg: string;
  timeline_of: number | null; mismatch_of: number | null;
}

const PMAX = 128; // partitions of one SBUF tile: the first mismatch's tile and row

export function escapeHtml(v: unknown): string {
  return String(v).replace(/[&<>"'`]/g, (c) => `&#${c.charCodeAt(0)};`);
}

function num(v: number | null | undefined, digits = 3): string {
  return v === null || v === undefined || !Number.isFinite(v) ? '—' : Number(v).toPrecision(digits);
}

function us(v: number): string {
  return v >= 1000 ? `${(v / 1000).toFixed(3)} ms` : `${v.toFixed(2)} µs`;
}

/** A fresh nonce for the page's style element (128 random bits). */
export function makeNonce(): string {
  return randomBytes(16).toString('base64').replace(/[^A-Za-z0-9]/g, '');
}

export function csp(nonce: string): string {
  return `default-src 'none'; img-src data:; style-src 'nonce-${nonce}'; script-src 'none'; font-src 'none'; ` +
    "connect-src 'none'; frame-src 'none'; form-action 'none'; base-uri 'none'";
}

const STYLE = `
body { font-family: var(--vscode-font-family, sans-serif); font-size: 13px; color: var(--vscode-foreground, #222);
  background: var(--vscode-editor-background, #fff); padding: 0 16px 24px; }
h1 { font-size: 18px; } h2 { font-size: 15px; margin-top: 24px; }
table { border-collapse: collapse; margin: 6px 0; } td, th { border: 1px solid rgba(128,128,128,.35); padding: 3px 8px; text-align: left; }
th { font-weight: 600; } .ok { color: #2d8a2d; font-weight: 600; } .bad { color: #c0392b; font-weight: 600; }
.muted { opacity: .75; } .notice { border-left: 3px solid #d2691e; padding-left: 6px; } .measured { color: #1f77b4; } .estimated { color: #d2691e; }
img.timeline { max-width: 100%; background: #fff; border: 1px solid rgba(128,128,128,.35); }
code { font-family: var(--vscode-editor-font-family, monospace); }
${Array.from({ length: 11 }, (_, i) => `.heat${i} { background: rgba(192,57,43,${(0.06 + 0.094 * i).toFixed(2)}); }`).join('\n')}`;

function verdictCell(r: RunEntry): string {
  const cls = r.correct === true ? 'ok' : r.correct === false || r.verdict === 'failed' || r.verdict === 'did not compile'
    ? 'bad' : 'muted';
  const mark = r.correct === true ? '✓ ' : r.correct === false ? '✗ ' : '';
  return `<td class="${cls}">${mark}${escapeHtml(r.verdict)}</td>`;
}

function kindLabel(r: RunEntry): string {
  return r.kind === 'remote' ? `runner ${r.runner}` : r.kind;
}

export function historyTable(runs: readonly RunEntry[]): string {
  const verifications = runs.filter((r) => r.kind !== 'simulate');
  if (verifications.length === 0) {
    return '<p class="muted">No verification yet: run <b>NKI Agent: Verify now</b>, or set <code>nkiAgent.verifyOnSave</code>.</p>';
  }
  const rows = verifications.map((r) => `<tr><td>v${escapeHtml(r.version)}</td><td>${escapeHtml(kindLabel(r))}</td>${verdictCell(r)}` +
    `<td>${num(r.max_abs_error)}</td><td>${num(r.max_rel_error)}</td>` +
    `<td>${escapeHtml(r.mismatches)}${r.elements ? ` / ${escapeHtml(r.elements)}` : ''}</td>` +
    `<td>${escapeHtml(r.target)} (${escapeHtml(r.backend)}${r.sandbox ? `, ${escapeHtml(r.sandbox)}` : ''})</td>` +
    `<td>${r.codes.map((c) => `<code>${escapeHtml(c)}</code>`).join(' ')}</td></tr>`).join('');
  return '<table><thead><tr><th>version</th><th>run</th><th>verdict</th><th>max abs error</th><th>max rel error</th>' +
    `<th>mismatched elements</th><th>target</th><th>problems</th></tr></thead><tbody>${rows}</tbody></table>`;
}

/** Latency per run, oldest left: measured points (filled circles, solid line) and estimated points
 *  (hollow diamonds, dashed line) on one axis, each series labelled; plus the figures as a table. */
export function latencyChart(runs: readonly RunEntry[]): string {
  const chrono = [...runs].reverse().filter((r) => r.measured || r.estimated);
  if (chrono.length === 0) {
    return '<p class="muted">No latency yet: the cost model estimates each verification; a remote runner measures it.</p>';
  }
  const W = 560, H = 180, L = 64, B = 28, T = 12;
  const values = chrono.flatMap((r) => [r.measured?.microseconds, r.estimated?.microseconds])
    .filter((v): v is number => typeof v === 'number' && Number.isFinite(v));
  const top = Math.max(...values, 1e-3) * 1.15;
  const x = (i: number) => L + (chrono.length === 1 ? (W - L) / 2 : (i * (W - L - 16)) / (chrono.length - 1) + 8);
  const y = (v: number) => T + (H - T - B) * (1 - v / top);
  const series = (pick: (r: RunEntry) => LatencyFigure | null) =>
    chrono.map((r, i) => ({ i, f: pick(r), r })).filter((p): p is { i: number; f: LatencyFigure; r: RunEntry } => p.f !== null);
  const measured = series((r) => r.measured);
  const estimated = series((r) => r.estimated);
  const path = (pts: { i: number; f: LatencyFigure }[]) => pts.map((p, k) => `${k ? 'L' : 'M'}${x(p.i).toFixed(1)},${y(p.f.microseconds).toFixed(1)}`).join(' ');
  const tip = (label: string, p: { f: LatencyFigure; r: RunEntry }) =>
    `<title>${escapeHtml(`${label} v${p.r.version}: ${us(p.f.microseconds)} (${p.f.source}, ${p.f.target}${p.f.detail ? `, ${p.f.detail}` : ''})`)}</title>`;
  const svg = [`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" role="img" aria-label="latency history">`,
    `<line x1="${L}" y1="${H - B}" x2="${W}" y2="${H - B}" stroke="currentColor" stroke-opacity=".4"/>`,
    `<line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="currentColor" stroke-opacity=".4"/>`,
    `<text x="4" y="${T + 10}" font-size="11" fill="currentColor">${escapeHtml(us(top))}</text>`,
    `<text x="4" y="${H - B}" font-size="11" fill="currentColor">0</text>`,
    ...chrono.map((r, i) => `<text x="${x(i).toFixed(1)}" y="${H - 8}" font-size="11" text-anchor="middle" fill="currentColor">v${escapeHtml(r.version)}</text>`)];
  if (estimated.length) {
    svg.push(`<path d="${path(estimated)}" fill="none" stroke="#d2691e" stroke-width="1.5" stroke-dasharray="5 4" class="estimated"/>`);
    for (const p of estimated) {
      const cx = x(p.i), cy = y(p.f.microseconds);
      svg.push(`<path d="M${cx.toFixed(1)},${(cy - 5).toFixed(1)} l5,5 l-5,5 l-5,-5 z" fill="none" stroke="#d2691e" stroke-width="1.5" class="estimated">${tip('estimated', p)}</path>`);
    }
  }
  if (measured.length) {
    svg.push(`<path d="${path(measured)}" fill="none" stroke="#1f77b4" stroke-width="2" class="measured"/>`);
    for (const p of measured) {
      svg.push(`<circle cx="${x(p.i).toFixed(1)}" cy="${y(p.f.microseconds).toFixed(1)}" r="4" fill="#1f77b4" class="measured">${tip('measured', p)}</circle>`);
    }
  }
  svg.push('</svg>');
  const legend = '<p><span class="measured">● measured</span> (a device, through a remote runner) · ' +
    '<span class="estimated">◇ estimated</span> (the cost model; never a measurement)</p>';
  const rows = chrono.map((r) => `<tr><td>v${escapeHtml(r.version)}</td><td>${escapeHtml(kindLabel(r))}</td>` +
    `<td class="measured">${r.measured ? `${escapeHtml(us(r.measured.microseconds))} <span class="muted">${escapeHtml(r.measured.source)}${r.measured.detail ? `, ${escapeHtml(r.measured.detail)}` : ''}</span>` : '—'}</td>` +
    `<td class="estimated">${r.estimated ? `≈ ${escapeHtml(us(r.estimated.microseconds))} est. <span class="muted">${escapeHtml(r.estimated.target)}, ${escapeHtml(r.estimated.detail)}</span>` : '—'}</td></tr>`).join('');
  return legend + svg.join('') + '<table><thead><tr><th>version</th><th>run</th><th>measured</th><th>estimated</th></tr></thead>' +
    `<tbody>${rows}</tbody></table>`;
}

export function timelineSection(report: KernelReport): string {
  if (!report.timeline_svg) {
    return '<p class="muted">No engine timeline: the kernel needs a task the cost model can run it on ' +
      '(open the report again after fixing it; <code>nki-agent profile --timeline FILE</code> draws one too).</p>';
  }
  const b64 = Buffer.from(report.timeline_svg, 'utf8').toString('base64');
  const older = report.timeline_of !== null && report.timeline_of !== report.version ? ' (an earlier version)' : '';
  return `<p class="muted">The cost model's estimate of version ${escapeHtml(report.timeline_of ?? '?')}${older} — estimated, not measured.</p>` +
    `<img class="timeline" alt="engine timeline (estimated)" src="data:image/svg+xml;base64,${b64}">`;
}

/** The bin (by its start offsets) that holds offset `v`. */
function binOf(starts: readonly number[], v: number): number {
  let i = 0;
  while (i + 1 < starts.length && starts[i + 1] <= v) {
    i++;
  }
  return i;
}

/** One output's mismatch map as an SVG grid: rows are partition bins, columns free-element bins, the
 *  red's strength the share of the bin's elements that differ; the first mismatch's bin is outlined. */
export function heatmapSvg(h: Heatmap, first?: { partition: number; freeFlat: number }): string {
  const rows = h.counts.length, cols = rows ? h.counts[0].length : 0;
  if (!rows || !cols || h.row_starts.length !== rows || h.col_starts.length !== cols) {
    return '';
  }
  const cw = Math.max(8, Math.min(24, Math.floor(640 / cols))), ch = Math.max(8, Math.min(20, Math.floor(320 / rows)));
  const L = 70, T = 8, W = L + cols * cw + 8, H = T + rows * ch + 34;
  const end = (starts: readonly number[], i: number, total: number) => (i + 1 < starts.length ? starts[i + 1] : total);
  const out = [`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" role="img" aria-label="mismatch heatmap">`];
  for (let i = 0; i < rows; i++) {
    for (let j = 0; j < cols; j++) {
      const p0 = h.row_starts[i], p1 = end(h.row_starts, i, h.partitions);
      const f0 = h.col_starts[j], f1 = end(h.col_starts, j, h.free);
      const size = Math.max(1, (p1 - p0) * (f1 - f0));
      const n = Number(h.counts[i][j]) || 0;
      const share = Math.min(1, n / size);
      out.push(`<rect x="${L + j * cw}" y="${T + i * ch}" width="${cw - 1}" height="${ch - 1}" fill="#c0392b" ` +
        `fill-opacity="${n ? (0.15 + 0.85 * share).toFixed(2) : '0.04'}"><title>${escapeHtml(
          `partitions ${p0}–${p1 - 1}, free ${f0}–${f1 - 1}: ${n} of ${size} differ`)}</title></rect>`);
    }
  }
  if (first) {
    const i = binOf(h.row_starts, first.partition), j = binOf(h.col_starts, first.freeFlat);
    out.push(`<rect x="${L + j * cw - 1}" y="${T + i * ch - 1}" width="${cw + 1}" height="${ch + 1}" fill="none" ` +
      'stroke="currentColor" stroke-width="2"><title>the first mismatch</title></rect>');
  }
  out.push(`<text x="4" y="${T + 10}" font-size="11" fill="currentColor">p 0</text>`,
    `<text x="4" y="${T + rows * ch}" font-size="11" fill="currentColor">p ${escapeHtml(h.partitions - 1)}</text>`,
    `<text x="${L}" y="${H - 8}" font-size="11" fill="currentColor">free 0 … ${escapeHtml(h.free - 1)} →</text>`, '</svg>');
  return out.join('');
}

/** Mismatches of the newest failing verification: per seed the mismatched share as a heat strip, the
 *  first mismatched element on the partition × free axes (its tile of 128 partitions), and the output's
 *  mismatch map (partition × free bins) when the toolchain sent one. */
export function mismatchSection(report: KernelReport): string {
  const run = report.mismatch_of === null ? undefined : report.runs[report.mismatch_of];
  if (run === undefined) {
    return '<p class="muted">No failing verification in the history.</p>';
  }
  const failing = run.seeds.filter((s) => !s.correct);
  const cells = run.seeds.map((s) => {
    const share = s.elements ? s.mismatches / s.elements : s.correct ? 0 : 1;
    const level = s.correct ? 0 : 1 + Math.round(9 * Math.min(1, share)); // classes, not style attributes: the CSP
    const label = s.hidden ? 'hidden seed' : `seed ${s.seed}`;
    return `<td title="${escapeHtml(`${label}: ${s.mismatches} of ${s.elements} elements differ`)}" ` +
      `class="heat${level}">${escapeHtml(label)}<br>${s.elements ? `${(100 * share).toFixed(1)} %` : escapeHtml(s.correct ? 'ok' : 'failed')}</td>`;
  }).join('');
  const firsts = failing.filter((s) => s.first_mismatch).map((s) => {
    const m = s.first_mismatch as FirstMismatch;
    return `<tr><td>${escapeHtml(s.hidden ? 'hidden seed' : `seed ${s.seed}`)}</td><td>${escapeHtml(m.output)}</td>` +
      `<td><code>[${escapeHtml(m.index.join(', '))}]</code></td><td>${escapeHtml(m.partition)} (tile ${Math.floor(m.partition / PMAX)}, row ${m.partition % PMAX})</td>` +
      `<td><code>[${escapeHtml(m.free.join(', '))}]</code></td><td>${num(m.got, 6)}</td><td>${num(m.expected, 6)}</td>` +
      `<td>${m.line === null ? '—' : escapeHtml(m.line)}</td></tr>`;
  }).join('');
  const messages = failing.filter((s) => s.message && !s.first_mismatch).map((s) => `<li>${escapeHtml(s.message)}</li>`).join('');
  const mapped = failing.find((s) => s.first_mismatch?.heatmap);
  let heat = '';
  if (mapped?.first_mismatch?.heatmap) {
    const m = mapped.first_mismatch;
    const h = m.heatmap as Heatmap;
    // the first mismatch is outlined when its free offset is known (one free axis: the shape of several is not sent)
    const svg = heatmapSvg(h, m.free.length <= 1 ? { partition: m.partition, freeFlat: m.free[0] ?? 0 } : undefined);
    heat = svg ? `<p>Where output ${escapeHtml(m.output)} differs (${escapeHtml(mapped.hidden ? 'hidden seed' : `seed ${mapped.seed}`)}; ` +
      `partition × free, ${escapeHtml(h.partitions)} × ${escapeHtml(h.free)} elements in bins):</p>${svg}` : '';
  }
  return `<p>Verification of v${escapeHtml(run.version)}: ${escapeHtml(run.mismatches)} mismatched element(s) ` +
    `(atol ${num(run.atol)}, rtol ${num(run.rtol)}). Share of mismatched elements per seed:</p>` +
    `<table class="heat"><tr>${cells}</tr></table>` +
    (firsts ? '<p>First mismatched element (partition × free):</p><table><thead><tr><th>seed</th><th>output</th><th>index</th>' +
      `<th>partition</th><th>free</th><th>got</th><th>expected</th><th>line</th></tr></thead><tbody>${firsts}</tbody></table>` : '') +
    heat + (messages ? `<ul>${messages}</ul>` : '');
}

/** The whole page. */
/** A line above the history: an error (`bad`) or a state of the page (the source is closed...). */
export interface ReportNotice {
  text: string;
  bad?: boolean;
}

export function renderReport(report: KernelReport, nonce: string, notice?: ReportNotice): string {
  const verifications = report.runs.filter((r) => r.kind !== 'simulate').length;
  return `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">` +
    `<meta http-equiv="Content-Security-Policy" content="${escapeHtml(csp(nonce))}">` +
    `<meta name="viewport" content="width=device-width, initial-scale=1"><title>NKI kernel report</title>` +
    `<style nonce="${escapeHtml(nonce)}">${STYLE}</style></head><body>` +
    `<h1>Kernel report: ${escapeHtml(report.path.split('/').pop() ?? report.path)}</h1>` +
    `<p class="muted">${escapeHtml(report.path)} · version ${escapeHtml(report.version)} · ` +
    `task ${report.task ? escapeHtml(report.task) : 'none'} · ${report.runs.length} run(s), ${verifications} verification(s) since the file was opened</p>` +
    (notice ? `<p class="${notice.bad ? 'bad' : 'notice'}">${escapeHtml(notice.text)}</p>` : '') +
    `<h2>Verification history</h2>${historyTable(report.runs)}` +
    `<h2>Latency history</h2>${latencyChart(report.runs)}` +
    `<h2>Engine timeline (cost model)</h2>${timelineSection(report)}` +
    `<h2>Mismatches</h2>${mismatchSection(report)}` +
    '</body></html>';
}
