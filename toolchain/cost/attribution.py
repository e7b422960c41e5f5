"""Where the time goes: per source line, per loop, per engine, FLOPs, HBM traffic and the timeline.

Attribution is along the critical path: each critical instruction owns the part of the makespan
between its predecessor's result and its own (``schedule._critical_path``), so the shares of lines
sum to makespan / latency <= 1, and a loop's share is the sum over the instructions inside it (nested
loops are included in their parents; siblings sum to <= 1). Work hidden under the critical path (a
prefetch DMA, an eviction overlapped with the next matmul) has no share; it shows in the engines' busy
time and in a loop's bound: the class of engine (TensorE, VectorE, ScalarE, GpSimd, DMA) with the
most busy time inside the loop. FLOPs are 2·K·M·N per matmul. The timeline has one bar per
instruction on its lane, merged into runs of consecutive instructions of one lane when there are
more than ``MAX_BARS``; times are from the kernel's first instruction (the launch overhead precedes it).

Builds the rows of the ``protocol_cost`` models (``LineCost``, ``LoopCost``, ``EngineBusy``, ``TimelineBar``)
as plain dicts with exactly their fields (validated into the models where they are read).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the result models are built in the parent; here rows are plain dicts (workers never
    from nki_agent.toolchain.protocol.cost import Bound, Engine  # import pydantic: a worker's start-up time matters)
from . import engines as E
from .schedule import Prepared, Schedule

MAX_BARS = 4000  # timeline bars per estimate (hovers and webviews stay responsive)
MAX_LINES = 200  # LineCost entries (protocol_cost: "at most 200")
CLASSES: tuple["Bound", ...] = ("TensorE", "VectorE", "ScalarE", "GpSimd", "DMA")
ENGINES: tuple["Engine", ...] = ("tensor", "vector", "scalar", "gpsimd", "dma")  # protocol_cost.Engine per class
_DMA_CLASS = 4


def class_of(lane: int) -> int:
    """Index into CLASSES of a schedule lane (-1: free)."""
    if lane < 0:
        return -1
    return lane if lane < E.DMA else _DMA_CLASS


@dataclass
class _Acc:
    crit: float = 0.0
    busy: list[float] = field(default_factory=lambda: [0.0] * 5)
    crit_by: list[float] = field(default_factory=lambda: [0.0] * 5)
    count: int = 0
    hbm: int = 0
    flops: float = 0.0
    first: float = math.inf
    last: float = 0.0
    api_busy: dict[str, float] = field(default_factory=dict)

    def add(self, other: _Acc) -> None:
        self.crit += other.crit
        for k in range(5):
            self.busy[k] += other.busy[k]
            self.crit_by[k] += other.crit_by[k]
        self.count += other.count
        self.hbm += other.hbm
        self.flops += other.flops
        self.first = min(self.first, other.first)
        self.last = max(self.last, other.last)


@dataclass
class Attribution:
    """Everything ``model.estimate`` reports besides the headline numbers."""

    lines: list[dict[str, Any]]  # LineCost rows
    loops: list[dict[str, Any]]  # LoopCost rows
    engines: list[dict[str, Any]]  # EngineBusy rows
    timeline: list[dict[str, Any]]  # TimelineBar rows
    flops: float
    hbm_bytes: int
    critical_by_class: list[float]  # ns of the critical path per CLASSES entry
    pe_kind: str  # the matmul kind with the most FLOPs ("bf16", "fp32", "double_row", "mx")


def _engine(acc: _Acc) -> "Engine":
    by = acc.crit_by if acc.crit > 0 else acc.busy
    return ENGINES[max(range(5), key=by.__getitem__)]


def attribute(p: Prepared, s: Schedule, latency_ns: float, timeline: bool = False) -> Attribution:
    """Attribute the schedule ``s`` of ``p`` to lines, loops and engines."""
    instrs = p.trace.instrs
    lanes, costs = p.lanes, p.costs
    busy, crit_ns = s.busy, s.critical_ns
    lines: dict[int, _Acc] = {}
    loops: dict[int, _Acc] = {}
    flops = 0.0
    hbm = 0
    pe_flops: dict[str, float] = {}
    critical_by_class = [0.0] * 5
    for i, ins in enumerate(instrs):
        k = class_of(lanes[i])
        c = costs[i]
        b = busy[i]
        cr = crit_ns.get(i, 0.0)
        ib = c.dma.hbm_bytes if c.dma is not None else 0
        flops += c.flops
        hbm += ib
        if c.flops:
            pe_flops[c.pe_kind] = pe_flops.get(c.pe_kind, 0.0) + c.flops
        la = lines.get(ins.line)
        if la is None:
            la = lines[ins.line] = _Acc()
        accs = [la]
        if ins.loops:
            lid = ins.loops[-1][0]
            lo = loops.get(lid)
            if lo is None:
                lo = loops[lid] = _Acc()
            accs.append(lo)
        for acc in accs:
            acc.crit += cr
            acc.count += 1
            acc.hbm += ib
            acc.flops += c.flops
            if k >= 0:
                acc.busy[k] += b
                acc.crit_by[k] += cr
                st = s.start[i]
                acc.first = min(acc.first, st)
                acc.last = max(acc.last, s.end[i])
        if k >= 0:
            critical_by_class[k] += cr
            la.api_busy[ins.api] = la.api_busy.get(ins.api, 0.0) + b
    lat = latency_ns if latency_ns > 0 else 1.0
    order = sorted(lines, key=lambda ln: (-lines[ln].crit, -sum(lines[ln].busy), ln))
    line_costs: list[dict[str, Any]] = [
        dict(line=line, us=lines[line].crit / 1000, share=min(1.0, lines[line].crit / lat), engine=_engine(lines[line]),
             instructions=lines[line].count,
             api=max(lines[line].api_busy, key=lines[line].api_busy.__getitem__) if lines[line].api_busy else "")
        for line in order]
    return Attribution(lines=line_costs[:MAX_LINES], loops=_loops(p, loops, lat), engines=_engines(p, s, lat),
                       timeline=_timeline(p, s) if timeline else [], flops=flops, hbm_bytes=hbm,
                       critical_by_class=critical_by_class,
                       pe_kind=max(pe_flops, key=pe_flops.__getitem__) if pe_flops else "bf16")


def _loops(p: Prepared, direct: dict[int, _Acc], lat: float) -> list[dict[str, Any]]:
    """Roll each loop's own instructions up into its ancestors, then build the LoopCost rows."""
    tree = p.trace.loops
    total: dict[int, _Acc] = {}
    for lid, acc in direct.items():
        cur: int | None = lid
        while cur is not None and cur in tree:
            total.setdefault(cur, _Acc()).add(acc)
            cur = tree[cur].parent
    agg = p.hw.dma_aggregate_bytes_per_ns
    out: list[dict[str, Any]] = []
    for lid, acc in total.items():
        lp = tree[lid]
        wall = acc.last - acc.first if acc.last > acc.first else 0.0
        k = max(range(5), key=acc.busy.__getitem__)
        bound: "Bound" = CLASSES[k] if acc.busy[k] > 0 else "overhead"
        out.append(dict(line=lp.line, var=lp.var, kind=lp.kind, trips=lp.trips, us=acc.crit / 1000,
                            share=min(1.0, acc.crit / lat), bound=bound,
                            hbm_bytes=acc.hbm, hbm_utilisation=min(1.0, acc.hbm / (wall * agg)) if wall else 0.0,
                            flops=acc.flops))
    out.sort(key=lambda lc: (-lc["us"], lc["line"]))
    return out


def _lane_name(lane: int) -> str:
    return E.LANE_NAMES[lane] if lane < E.DMA else f"DMA q{lane - E.DMA}"


def _engines(p: Prepared, s: Schedule, lat: float) -> list[dict[str, Any]]:
    out = []
    for lane in range(p.lane_count):
        if not s.lane_instrs[lane]:
            continue
        out.append(dict(lane=_lane_name(lane), engine=ENGINES[class_of(lane)],
                              busy_us=s.lane_busy[lane] / 1000, utilisation=min(1.0, s.lane_busy[lane] / lat),
                              instructions=s.lane_instrs[lane]))
    return out


def _timeline(p: Prepared, s: Schedule) -> list[dict[str, Any]]:
    """Bars per lane in time order; runs of ``f`` consecutive instructions merged when there are many."""
    per_lane: dict[int, list[int]] = {}
    for i, lane in enumerate(p.lanes):
        if lane >= 0:
            per_lane.setdefault(lane, []).append(i)
    total = sum(len(v) for v in per_lane.values())
    if not total:
        return []
    f = max(1, math.ceil(total / MAX_BARS))
    critical = set(s.critical)
    instrs = p.trace.instrs
    bars: list[dict[str, Any]] = []
    for lane in sorted(per_lane):
        idx = per_lane[lane]
        name = _lane_name(lane)
        for g in range(0, len(idx), f):
            run = idx[g:g + f]
            top = max(run, key=s.busy.__getitem__)
            bars.append(dict(lane=name, start_us=s.start[run[0]] / 1000,
                                    end_us=max(s.start[i] + s.busy[i] for i in run) / 1000,
                                    api=instrs[top].api, line=instrs[top].line,
                                    critical=any(i in critical for i in run)))
    return bars
