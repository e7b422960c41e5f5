"""A cost estimate's engine timeline as one self-contained SVG picture (``nki-agent profile --timeline F``).

One lane per engine and DMA queue (TensorE, VectorE, ScalarE, GpSimd, then ``DMA q0`` ...), each
instruction a bar coloured by its engine; bars on the critical path are drawn darker and outlined.
A time axis in µs (ms past a millisecond) runs along the bottom; the title carries the estimate's
summary and says "estimated" — the picture is the cost model's, never a measurement.

The file has no scripts, links, images, fonts or style sheets: only shapes, text and native
``<title>`` tooltips (instruction, line, start and end). Every string in it (API names, lane names,
notes, the kernel's path: kernel-controlled) is XML-escaped and stripped of characters XML 1.0 cannot
hold. Thousands of bars stay readable and the file small: within a lane, consecutive bars closer
than half a pixel with the same criticality are merged into one bar whose tooltip counts them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from nki_agent.toolchain.protocol.cost import CostEstimate, TimelineBar

PLOT_W = 1100  # px of the time axis: wide enough for a laptop screen, narrow enough for a README
LABEL_W = 92  # lane labels on the left
PAD = 16
LANE_H = 20
LANE_GAP = 6
HEAD_H = 58  # title + subtitle
AXIS_H = 34
NOTE_H = 16
MERGE_PX = 0.5  # bars closer than this merge: a screen cannot show the gap anyway
MAX_RUNS = 3 * PLOT_W  # drawn bars per lane before criticality stops splitting runs (file size bound)
MIN_BAR_PX = 0.6  # a bar is always at least this wide, or a lone short instruction would vanish
MAX_TEXT = 160  # characters of any one string from the estimate (tooltips stay readable)
MAX_NOTES = 6

# per engine: (fill, critical fill) — ColorBrewer-like hues that stay distinct when darkened
COLOURS: dict[str, tuple[str, str]] = {
    "tensor": ("#6b9bd1", "#1f4e8c"),
    "vector": ("#7cc47a", "#2d6e2b"),
    "scalar": ("#f5a65b", "#a5560a"),
    "gpsimd": ("#c39bd3", "#6c3483"),
    "dma": ("#7fcdc4", "#1d6b63"),
    "sync": ("#c8c8c8", "#606060"),
}
_LANE_ORDER = ("tensor", "vector", "scalar", "gpsimd", "dma", "sync")
_INVALID_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def clean(text: object, limit: int = MAX_TEXT) -> str:
    """``text`` as a string XML can hold: invalid characters replaced, at most ``limit`` characters."""
    s = _INVALID_XML.sub("\ufffd", str(text))
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _t(text: object, limit: int = MAX_TEXT) -> str:
    """Text content: cleaned and escaped."""
    return escape(clean(text, limit))


def engine_of(lane: str) -> str:
    """The engine family of a lane name ("DMA q3" → "dma", "TensorE" → "tensor"; unknown → "sync")."""
    low = lane.lower()
    for key, prefix in (("tensor", "tensor"), ("vector", "vector"), ("scalar", "scalar"), ("gpsimd", "gpsimd"),
                        ("dma", "dma"), ("gpsimd", "pool")):
        if low.startswith(prefix):
            return key
    return "sync"


def _lane_key(lane: str) -> tuple[int, int, str]:
    digits = re.findall(r"\d+", lane)
    return _LANE_ORDER.index(engine_of(lane)), int(digits[-1]) if digits else -1, lane


def lanes_of(est: CostEstimate) -> list[str]:
    """The lanes to draw: every engine of the estimate and every lane a bar is on, in hardware order."""
    names = {e.lane for e in est.engines} | {b.lane for b in est.timeline}
    return sorted(names, key=_lane_key)


@dataclass
class Run:
    """One drawn bar: a single instruction or consecutive ones merged at this scale."""

    start: float
    end: float
    critical: bool
    count: int = 1
    apis: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)

    def add(self, bar: TimelineBar) -> None:
        self.end = max(self.end, bar.end_us)
        self.count += 1
        if bar.api not in self.apis and len(self.apis) < 3:
            self.apis.append(bar.api)
        if bar.line not in self.lines and len(self.lines) < 5:
            self.lines.append(bar.line)


def _sane(b: TimelineBar) -> bool:
    return math.isfinite(b.start_us) and math.isfinite(b.end_us) and 0 <= b.start_us <= b.end_us


def merge(bars: Iterable[TimelineBar], us_per_px: float, keep_critical: bool = True) -> list[Run]:
    """One lane's bars (any order) as the runs drawn at ``us_per_px``: a bar joins the previous run when
    it starts less than ``MERGE_PX`` after it, the run is under 4 px wide and (``keep_critical``) both
    are on the critical path or both off it; without ``keep_critical`` a run is critical if any of its
    bars is (the fallback for a lane whose bars alternate, so the picture stays bounded)."""
    runs: list[Run] = []
    for b in sorted((b for b in bars if _sane(b)), key=lambda b: (b.start_us, b.end_us)):
        last = runs[-1] if runs else None
        if last is not None and (last.critical == b.critical or not keep_critical) \
                and (b.start_us - last.end) < MERGE_PX * us_per_px and (last.end - last.start) < 4 * us_per_px:
            last.add(b)
            last.critical = last.critical or b.critical
        else:
            runs.append(Run(b.start_us, b.end_us, b.critical, apis=[b.api], lines=[b.line]))
    return runs


def nice_step(span: float, ticks: int = 8) -> float:
    """A 1-2-5 step giving about ``ticks`` ticks over ``span``."""
    if not (span > 0 and math.isfinite(span)):
        return 1.0
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    return float(next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw))


def fmt_time(us: float, in_ms: bool) -> str:
    v = us / 1000 if in_ms else us
    text = f"{v:.6g}"
    return f"{text} ms" if in_ms else f"{text} µs"


def _tooltip(r: Run, in_ms: bool) -> str:
    span = f"{fmt_time(r.start, in_ms)} – {fmt_time(r.end, in_ms)}"
    what = ", ".join(r.apis) + (" …" if r.count > len(r.apis) else "")
    where = "line " + ", ".join(str(n) for n in r.lines) if r.lines else ""
    head = f"{r.count} instructions: " if r.count > 1 else ""
    crit = " (critical path)" if r.critical else ""
    return f"{head}{what} {where} {span}{crit}"


def render(est: CostEstimate, subtitle: str = "") -> str:
    """The SVG document of ``est``'s timeline (``subtitle``: e.g. the kernel's path)."""
    lanes = lanes_of(est)
    ends = [b.end_us for b in est.timeline if _sane(b)]
    total = max([est.latency_us if math.isfinite(est.latency_us) else 0.0, *ends, 1e-3])
    us_per_px = total / PLOT_W
    in_ms = total >= 1000
    notes: list[str] = []
    if not est.timeline:
        notes.append("No timeline in this estimate: the cost model recorded no instruction bars.")
    if est.truncated:
        notes.append("The trace hit its limit: the estimate covers only the recorded part of the launch.")
    notes += [clean(n) for n in est.notes[:MAX_NOTES]]
    body_h = max(1, len(lanes)) * (LANE_H + LANE_GAP)
    height = HEAD_H + body_h + AXIS_H + NOTE_H * (len(notes) + 1) + PAD
    width = PAD + LABEL_W + PLOT_W + PAD
    x0, y0 = PAD + LABEL_W, HEAD_H
    title = f"{est.summary()} — estimated by the cost model, not measured"
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">'),
           f"<title>{_t(title)}</title>",
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
           f'<text x="{PAD}" y="22" font-size="16" font-weight="bold">{_t(title)}</text>']
    sub = [s for s in (subtitle, f"{len(est.timeline)} bars on {len(lanes)} lanes",
                       "dark outlined bars: critical path") if s]
    out.append(f'<text x="{PAD}" y="42" fill="#444444">{_t(" · ".join(sub), 300)}</text>')
    out += _axis(x0, y0, body_h, total, us_per_px, in_ms)
    for i, lane in enumerate(lanes):
        out += _lane(lane, [b for b in est.timeline if b.lane == lane], x0, y0 + i * (LANE_H + LANE_GAP),
                     us_per_px, in_ms)
    ny = y0 + body_h + AXIS_H + NOTE_H
    for n in notes:
        out.append(f'<text x="{PAD}" y="{ny}" fill="#444444" class="note">{_t(n, 300)}</text>')
        ny += NOTE_H
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _axis(x0: int, y0: int, body_h: int, total: float, us_per_px: float, in_ms: bool) -> list[str]:
    step = nice_step(total)
    base = y0 + body_h
    out = [f'<line x1="{x0}" y1="{base}" x2="{x0 + PLOT_W}" y2="{base}" stroke="#333333"/>']
    k = 0
    while (t := k * step) <= total * (1 + 1e-9) and k <= 100:
        x = x0 + t / us_per_px
        out.append(f'<line x1="{x:.2f}" y1="{y0}" x2="{x:.2f}" y2="{base + 4}" stroke="#e4e4e4"/>')
        out.append(f'<text x="{x:.2f}" y="{base + 18}" text-anchor="middle" fill="#333333">'
                   f"{_t(fmt_time(t, in_ms))}</text>")
        k += 1
    out.append(f'<text x="{x0 + PLOT_W}" y="{base + 32}" text-anchor="end" fill="#666666">'
               f"time since launch ({'ms' if in_ms else 'µs'}, estimated)</text>")
    return out


def _lane(lane: str, bars: Sequence[TimelineBar], x0: int, y: int, us_per_px: float, in_ms: bool) -> list[str]:
    fill, dark = COLOURS[engine_of(lane)]
    out = [f'<g class="lane" data-lane={quoteattr(clean(lane, 40))}>',
           f'<text x="{x0 - 8}" y="{y + LANE_H - 6}" text-anchor="end">{_t(lane, 40)}</text>',
           f'<rect x="{x0}" y="{y}" width="{PLOT_W}" height="{LANE_H}" fill="#f6f6f6"/>']
    runs = merge(bars, us_per_px)
    if len(runs) > MAX_RUNS:
        runs = merge(bars, us_per_px, keep_critical=False)
    for r in runs:
        x = x0 + r.start / us_per_px
        w = max(MIN_BAR_PX, (r.end - r.start) / us_per_px)
        attrs = (f'fill="{dark}" stroke="#000000" stroke-width="0.8" class="bar critical"' if r.critical
                 else f'fill="{fill}" class="bar"')
        out.append(f'<rect x="{x:.2f}" y="{y + 2}" width="{w:.2f}" height="{LANE_H - 4}" {attrs}>'
                   f"<title>{_t(_tooltip(r, in_ms), 400)}</title></rect>")
    out.append("</g>")
    return out


def write(est: CostEstimate, path: str | Path, subtitle: str = "") -> Path:
    """Write ``render(est)`` to ``path`` (UTF-8); returns the path. Raises ``OSError``."""
    p = Path(path)
    p.write_text(render(est, subtitle), encoding="utf-8")
    return p
