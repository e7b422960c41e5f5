"""textDocument/inlayHint: ``: (128, 512) float32 sbuf`` after tensor assignments, ``×N`` after loops,
``≈ 41 % · DMA`` at the end of loop headers.

Tensor facts: the last local simulation's trace (placed on the current text: lines follow the edits made
since the run) wins over static inference on the same line; a static fact with nothing known (no shape,
no dtype) is not shown. Loop hints: the trip count of
``affine_range(N)``-style loops whose bounds are known statically. Cost hints (``costHints``): each
loop's share of the cost model's estimated time and what bounds it, from the last local run; after an
edit they follow their loop, and a loop header that was edited has none (``diagnostics.cost_view``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as T

from ...diagnostics.cost_view import CostView, loop_hint, loop_phrase
from ..facts import TensorFact, simulation_facts
from ..positions import to_lsp
from .hover import fmt_shape

if TYPE_CHECKING:
    from ..app import NkiLanguageServer

STALE_TIP = " (estimate of an earlier version of this file)"


def label(f: TensorFact) -> str | None:
    bits = []
    if f.shape is not None and any(d is not None for d in f.shape):
        bits.append(fmt_shape(f.shape) + (" …" if len(f.shapes_seen) > 1 else ""))
    if f.dtype:
        bits.append(f.dtype)
    if f.buffer and bits:
        bits.append(f.buffer)
    return ": " + " ".join(bits) if bits else None


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(T.TEXT_DOCUMENT_INLAY_HINT)
    async def inlay_hints(ls: NkiLanguageServer, params: T.InlayHintParams) -> list[T.InlayHint]:
        snap = ls.state.store.get(params.text_document.uri)
        if snap is None or snap.too_large:
            return []
        lines = snap.text.split("\n")
        facts = await ls.state.facts(snap)
        first, last = params.range.start.line + 1, params.range.end.line + 1
        chosen: dict[tuple[int, str], TensorFact] = {}
        for f in facts.tensors:
            if f.source == "static" and not f.shape:
                continue
            chosen.setdefault((f.line, f.name), f)
        st = ls.state.docs.get(snap.uri)
        for run in (st.runs.values() if st else ()):
            if run.kind == "remote":
                continue
            for f in simulation_facts(run.trace, run.text, snap.text, facts.tensors):
                if 0 < f.line <= len(lines) and f.column > 0:
                    chosen[(f.line, f.name)] = f
        hints: list[T.InlayHint] = []
        for (line, name), f in sorted(chosen.items()):
            if not first <= line <= last or f.column <= 0:
                continue
            text = label(f)
            if text is None:
                continue
            pl, pc = to_lsp(lines, line, f.column + len(name))
            hints.append(T.InlayHint(position=T.Position(pl, pc), label=text, kind=T.InlayHintKind.Type,
                                     tooltip=f"from {'the last simulation' if f.source == 'simulation' else 'static inference'}",
                                     padding_left=False))
        for loop in facts.loops:
            if first <= loop.line <= last:
                pl, pc = to_lsp(lines, loop.line, loop.end_column)
                hints.append(T.InlayHint(position=T.Position(pl, pc), label=f" ×{loop.trips}",
                                         kind=T.InlayHintKind.Parameter, tooltip=f"{loop.kind}: {loop.trips} iterations"))
        if ls.state.settings.cost_hints:
            hints.extend(cost_hints(ls.state.cost_view(snap), lines, first, last))
        return hints


def cost_hints(view: CostView | None, lines: list[str], first: int, last: int) -> list[T.InlayHint]:
    """One hint at the end of each loop header in lines ``first..last`` (1-based) that the estimate times."""
    if view is None:
        return []
    out = []
    for line, loop in sorted(view.loops.items()):
        if not first <= line <= last or line > len(lines):
            continue
        text = lines[line - 1].rstrip("\r")
        pl, pc = to_lsp(lines, line, len(text.rstrip()) + 1)
        out.append(T.InlayHint(position=T.Position(pl, pc), label=loop_hint(loop), padding_left=True,
                               tooltip=loop_phrase(loop) + (STALE_TIP if view.stale else "")))
    return out
