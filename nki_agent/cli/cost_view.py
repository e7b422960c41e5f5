"""The cost model's estimate in the terminal (rich): what ``nki-agent profile`` prints below the verdict.

Every heading and figure says "estimated" / "est.": the analytical model's numbers are never printed
as a measurement (a runner's measured latency is the profile table's own "latency" row). Strings from
the estimate (API names, notes) are shown as plain ``Text``, never parsed as rich markup.
"""

from __future__ import annotations

import math

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from nki_agent.toolchain.protocol.cost import CostEstimate

TOP = 10  # lines and loops shown: the rest is in --json


def us(v: float) -> str:
    """A duration from µs: "6.97 ms", "12.3 µs"."""
    if not math.isfinite(v):
        return str(v)
    return f"{v / 1000:.3g} ms" if abs(v) >= 1000 else f"{v:.3g} µs"


def pct(v: float) -> str:
    return f"{v * 100:.1f} %" if math.isfinite(v) else str(v)


def si(v: float, unit: str) -> str:
    """1.07e9, "FLOP" → "1.07 GFLOP"."""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def _table(title: str, *columns: str) -> Table:
    t = Table(title=title, title_justify="left", title_style="bold", box=None, pad_edge=False, show_edge=False)
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 or c in ("engine", "API", "var", "kind", "bound") else "right")
    return t


def headline(est: CostEstimate) -> Text:
    """"≈ 6.97 ms est. trn1, TensorE-bound (estimated by the cost model, not measured)"."""
    return Text.assemble((est.summary(), "bold"), " (estimated by the cost model, not measured)")


def overview(est: CostEstimate) -> Table:
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    rows = [("est. latency", f"≈ {us(est.latency_us)} on {est.target} (launch overhead {us(est.overhead_us)})"),
            ("bound", f"{est.bound} (estimated)"),
            ("critical path", f"≈ {us(est.critical_path_us)}" if est.critical_path_us else "-"),
            ("FLOP util.", f"{pct(est.flop_utilisation)} of TensorE peak ({si(est.flops, 'FLOP')})"),
            ("bandwidth util.", f"{pct(est.bandwidth_utilisation)} of DMA bandwidth ({si(est.hbm_bytes, 'B')} HBM)"),
            ("instructions", f"{est.instructions}" + (" (trace truncated: partial estimate)" if est.truncated else "")),
            ("calibration", est.calibration or "documented constants (uncalibrated)")]
    for k, v in rows:
        t.add_row(k, Text(v))
    return t


def engines(est: CostEstimate) -> Table:
    t = _table("engines (est. busy time)", "lane", "busy", "util.", "instr.")
    for e in est.engines:
        t.add_row(Text(e.lane), us(e.busy_us), pct(e.utilisation), str(e.instructions))
    return t


def lines(est: CostEstimate) -> Table:
    t = _table(f"top lines (est., of {len(est.lines)})", "line", "time", "share", "engine", "API")
    for c in sorted(est.lines, key=lambda c: -c.us)[:TOP]:
        t.add_row(str(c.line), us(c.us), pct(c.share), Text(c.engine), Text(c.api or "-"))
    return t


def loops(est: CostEstimate) -> Table:
    t = _table(f"top loops (est., of {len(est.loops)})", "line", "var", "kind", "trips", "share", "bound", "HBM util.")
    for lp in sorted(est.loops, key=lambda c: -c.us)[:TOP]:
        t.add_row(str(lp.line), Text(lp.var), Text(lp.kind), str(lp.trips), pct(lp.share), Text(lp.bound),
                  pct(lp.hbm_utilisation))
    return t


def render(est: CostEstimate) -> RenderableType:
    """The whole estimate section: headline, overview, engines, top lines and loops, notes."""
    parts: list[RenderableType] = [Text(""), headline(est), overview(est)]
    if est.engines:
        parts += [Text(""), engines(est)]
    if est.lines:
        parts += [Text(""), lines(est)]
    if est.loops:
        parts += [Text(""), loops(est)]
    if est.notes:
        parts += [Text(""), Text("notes (cost model)", style="bold")]
        parts += [Text(f"  - {n}") for n in est.notes]
    return Group(*parts)
