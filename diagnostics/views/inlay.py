"""Inlay hint content as a pure function of a ``DocumentView``: ``: (128, 512) float32 sbuf`` after tensor
assignments, ``×N`` after loops, ``≈ 41 % · DMA`` at the end of loop headers.

Tensor facts: the last local simulation's trace (placed on the current text: lines follow the edits made
since the run) wins over static inference on the same line; a static fact with nothing known (no shape,
no dtype) is not shown. Loop hints: the trip count of ``affine_range(N)``-style loops whose bounds are known
statically. Cost hints (the ``costHints`` setting): each loop's share of the cost model's estimated time and
what bounds it, from the last local run; after an edit they follow their loop, and a loop header that was
edited has none (``diagnostics.cost_view``). Positions are 1-based lines and code-point columns.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cost_view import CostView, loop_hint, loop_phrase
from .context import DocumentView
from .facts import TensorFact, simulation_facts
from .hover import fmt_shape

STALE_TIP = " (estimate of an earlier version of this file)"


@dataclass(frozen=True)
class Hint:
    line: int  # 1-based
    column: int  # 1-based code point the hint goes before
    label: str
    kind: str  # "type" (tensor facts) | "parameter" (trip counts) | "cost" (the estimate)
    tooltip: str
    padding_left: bool = False


def label(f: TensorFact) -> str | None:
    bits = []
    if f.shape is not None and any(d is not None for d in f.shape):
        bits.append(fmt_shape(f.shape) + (" …" if len(f.shapes_seen) > 1 else ""))
    if f.dtype:
        bits.append(f.dtype)
    if f.buffer and bits:
        bits.append(f.buffer)
    return ": " + " ".join(bits) if bits else None


def hints(view: DocumentView, first: int, last: int, cost: bool = True) -> list[Hint]:
    """The hints of lines ``first..last`` (1-based, inclusive); ``cost``: with the estimate's loop hints."""
    lines = view.lines
    chosen: dict[tuple[int, str], TensorFact] = {}
    for f in view.facts.tensors:
        if f.source == "static" and not f.shape:
            continue
        chosen.setdefault((f.line, f.name), f)
    for run in view.local_runs():
        for f in simulation_facts(run.trace, run.text, view.text, view.facts.tensors):
            if 0 < f.line <= len(lines) and f.column > 0:
                chosen[(f.line, f.name)] = f
    out: list[Hint] = []
    for (line, name), f in sorted(chosen.items()):
        if not first <= line <= last or f.column <= 0:
            continue
        text = label(f)
        if text is not None:
            out.append(Hint(line, f.column + len(name), text, "type",
                            f"from {'the last simulation' if f.source == 'simulation' else 'static inference'}"))
    for loop in view.facts.loops:
        if first <= loop.line <= last:
            out.append(Hint(loop.line, loop.end_column, f" ×{loop.trips}", "parameter",
                            f"{loop.kind}: {loop.trips} iterations"))
    if cost:
        out.extend(cost_hints(view.cost, lines, first, last))
    return out


def cost_hints(view: CostView | None, lines: list[str], first: int, last: int) -> list[Hint]:
    """One hint at the end of each loop header in lines ``first..last`` (1-based) that the estimate times."""
    if view is None:
        return []
    out = []
    for line, loop in sorted(view.loops.items()):
        if not first <= line <= last or line > len(lines):
            continue
        text = lines[line - 1].rstrip("\r")
        out.append(Hint(line, len(text.rstrip()) + 1, loop_hint(loop), "cost",
                        loop_phrase(loop) + (STALE_TIP if view.stale else ""), padding_left=True))
    return out
