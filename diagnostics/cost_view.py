"""Where the cost model's estimate lands in a buffer, and how it reads to people.

A ``CostEstimate`` (``toolchain/protocol/cost.py``) names source lines of the text its run saw; the editor
shows it on the *current* text, which may have changed since. ``place`` maps the run's lines onto the
current ones (``LineMap``: lines above and below an edit shift with it, lines inside an edited region map
to nothing), so a hint or hover never lands on a line the estimate is not about; ``CostView`` then answers
"which loop / line cost is at line L" in current lines. The phrases (``loop_phrase``, ``line_phrase``,
``loop_hint``, ``estimate_markdown``) always say *estimated*: a measured latency (the remote runner's) is
shown elsewhere, under its own label, and never mixed with these.

Pure: plain data in, plain data and text out; imports only the protocol models (no LSP, no I/O).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from nki_agent.toolchain.protocol.cost import CostEstimate, LineCost, LoopCost

ENGINE_NAMES = {"tensor": "TensorE", "vector": "VectorE", "scalar": "ScalarE", "gpsimd": "GpSimd", "dma": "DMA",
                "sync": "Sync"}
# The changed middle of two texts is matched line by line with difflib only below this many line pairs
# (difflib is quadratic in the worst case); a bigger rewrite maps only the unchanged head and tail.
MAX_DIFF_PAIRS = 4_000_000
MAX_ENGINE_ROWS = 8  # a hover's engine table: the busiest lanes (the DMA queues share one row)


@dataclass(frozen=True)
class LineMap:
    """1-based lines of an old text → lines of a new one, for the lines that survived unchanged."""

    head: int  # lines 1..head are the same in both
    tail: int  # the last ``tail`` lines are the same in both
    old_lines: int
    new_lines: int
    middle: Mapping[int, int] = field(default_factory=dict)  # unchanged lines between head and tail

    def __call__(self, line: int) -> int | None:
        if 0 < line <= self.head:
            return line
        if self.old_lines - self.tail < line <= self.old_lines:
            return line + self.new_lines - self.old_lines
        return self.middle.get(line)


@lru_cache(maxsize=32)  # hints and hovers of one buffer revision ask again and again (texts hash once)
def line_map(old: str, new: str) -> LineMap:
    """How the lines of ``old`` moved in ``new``: common head and tail, then difflib on the middle."""
    a, b = old.split("\n"), new.split("\n")
    head = 0
    limit = min(len(a), len(b))
    while head < limit and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < limit - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    mid_a, mid_b = a[head:len(a) - tail], b[head:len(b) - tail]
    middle: dict[int, int] = {}
    if mid_a and mid_b and len(mid_a) * len(mid_b) <= MAX_DIFF_PAIRS:
        matcher = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False)
        for i, j, n in matcher.get_matching_blocks():
            for k in range(n):
                middle[head + i + k + 1] = head + j + k + 1
    return LineMap(head, tail, len(a), len(b), middle)


@dataclass(frozen=True)
class CostView:
    """An estimate placed on the current text: its loop and line costs keyed by *current* line."""

    estimate: CostEstimate
    stale: bool  # the text changed since the run: figures are those of the earlier version
    loops: Mapping[int, LoopCost]
    lines: Mapping[int, LineCost]
    kernel: str = ""  # the launched kernel's name, when the run reports it

    def loop_at(self, line: int) -> LoopCost | None:
        return self.loops.get(line)

    def line_at(self, line: int) -> LineCost | None:
        return self.lines.get(line)

    def kernel_line(self, kernels: Sequence[tuple[str, int]]) -> int | None:
        """The ``def`` line (among ``kernels``: (name, def line), current lines) of the kernel the estimate
        is about: the one called ``self.kernel`` when known, else the nearest above the most expensive
        placed line, else the only kernel of the file."""
        for kname, kline in kernels:
            if self.kernel and kname == self.kernel:
                return kline
        costs = [(c.us, line) for line, c in self.lines.items()] + [(c.us, line) for line, c in self.loops.items()]
        if costs:
            anchor = max(costs)[1]
            above = [kline for _, kline in kernels if kline <= anchor]
            if above:
                return max(above)
        return kernels[0][1] if len(kernels) == 1 else None


def place(estimate: CostEstimate, text: str, ran_on: str | None, kernel: str = "") -> CostView:
    """``estimate`` of a run (of ``kernel``) on the text ``ran_on`` (None: unknown) placed on ``text``. Costs
    whose line changed (or cannot be told) are left out; the most expensive loop / line wins where several
    land on one line."""
    if ran_on is None:
        return CostView(estimate, True, {}, {}, kernel)
    stale = ran_on != text
    where = line_map(ran_on, text) if stale else None
    loops: dict[int, LoopCost] = {}
    for loop in estimate.loops:
        at = where(loop.line) if where is not None else loop.line
        if at is not None and at > 0 and (at not in loops or loops[at].us < loop.us):
            loops[at] = loop
    lines: dict[int, LineCost] = {}
    for cost in estimate.lines:
        if cost.us <= 0 and cost.share <= 0:  # issued there, but no time attributed: nothing to say
            continue
        at = where(cost.line) if where is not None else cost.line
        if at is not None and at > 0 and (at not in lines or lines[at].us < cost.us):
            lines[at] = cost
    return CostView(estimate, stale, loops, lines, kernel)


# ---------------------------------------------------------------- phrases (always "estimated")


def fmt_us(us: float) -> str:
    """"6.97 ms" / "41.2 µs", as ``CostEstimate.summary`` writes it."""
    return f"{us / 1000:.3g} ms" if us >= 1000 else f"{us:.3g} µs"


def pct(fraction: float) -> str:
    """"41 %"; "< 1 %" for a small non-zero share (a rounded "0 %" would read as free)."""
    if fraction <= 0:
        return "0 %"
    if fraction < 0.005:
        return "< 1 %"
    return f"{round(fraction * 100)} %"


def engine_name(engine: str) -> str:
    return ENGINE_NAMES.get(engine, engine)


def loop_phrase(loop: LoopCost) -> str:
    """"this loop: 41 % of estimated time, DMA-bound, 23 % of HBM bandwidth, 512 trips (affine)"."""
    parts = [f"this loop: {pct(loop.share)} of estimated time", f"{loop.bound}-bound"]
    if loop.hbm_bytes > 0 or loop.hbm_utilisation > 0:
        parts.append(f"{pct(loop.hbm_utilisation)} of HBM bandwidth")
    parts.append(f"{loop.trips} trip{'' if loop.trips == 1 else 's'} ({loop.kind})")
    return ", ".join(parts)


def line_phrase(cost: LineCost) -> str:
    """"this line: 12 % of estimated time (nisa.nc_matmul on TensorE, 3.1 ms)"."""
    what = f"{cost.api} on {engine_name(cost.engine)}" if cost.api else f"on {engine_name(cost.engine)}"
    return f"this line: {pct(cost.share)} of estimated time ({what}, {fmt_us(cost.us)})"


def loop_hint(loop: LoopCost) -> str:
    """The short inlay hint of a loop header: "≈ 41 % · DMA"."""
    return f"≈ {pct(loop.share)} · {loop.bound}"


def estimate_markdown(estimate: CostEstimate, heading: str) -> str:
    """``heading``, the summary, a per-engine busy table, the kernel's totals and the model's notes."""
    est = estimate
    rows = [heading, "", f"{est.summary()} (cost model — an estimate, not a measurement)", ""]
    rows += _engine_rows(est)
    totals = [f"launch overhead {fmt_us(est.overhead_us)}"]
    if est.flops > 0:
        totals.append(f"{_si(est.flops)}FLOP ({pct(est.flop_utilisation)} of TensorE peak)")
    if est.hbm_bytes > 0:
        totals.append(f"{_bytes(est.hbm_bytes)} HBM traffic ({pct(est.bandwidth_utilisation)} of DMA bandwidth)")
    rows.append(" · ".join(totals))
    notes = list(est.notes)
    if est.truncated:
        notes.append("the trace hit its limit: the estimate covers only the recorded part of the launch")
    if notes:
        rows += [""] + [f"- {n}" for n in notes]
    return "\n".join(rows)


def _engine_rows(est: CostEstimate) -> list[str]:
    """The busy table, busiest first; the DMA queues as one row (their busiest queue), idle lanes left out."""
    busy = [e for e in est.engines if e.busy_us > 0 or e.instructions > 0]
    queues = [e for e in busy if e.engine == "dma"]
    rows = [(e.busy_us, e.lane, e.utilisation, e.instructions) for e in busy if e.engine != "dma" or len(queues) == 1]
    if len(queues) > 1:
        top = max(queues, key=lambda e: e.busy_us)
        rows.append((top.busy_us, f"DMA ({len(queues)} queues, busiest)", top.utilisation,
                     sum(e.instructions for e in queues)))
    if not rows:
        return []
    rows.sort(key=lambda r: -r[0])
    out = ["| engine | busy (est.) | utilisation | instructions |", "|---|---|---|---|"]
    out += [f"| {lane} | {fmt_us(us)} | {pct(util)} | {n:,} |" for us, lane, util, n in rows[:MAX_ENGINE_ROWS]]
    if len(rows) > MAX_ENGINE_ROWS:
        out.append(f"| … {len(rows) - MAX_ENGINE_ROWS} more lanes | | | |")
    return out + [""]


def _si(x: float) -> str:
    """"1.07 G" for 1.07e9 (followed by the unit)."""
    for prefix, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= size:
            return f"{x / size:.3g} {prefix}"
    return f"{x:.3g} "


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"
