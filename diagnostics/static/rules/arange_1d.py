"""1-D ``nl.arange`` used to index a tile (``err_1d_arange_not_supported``). Fix: add the axis."""

from __future__ import annotations

import ast

from ..finding import Finding, NodeFix
from ..interp import Event
from ..values import IndexV

CODE = "err_1d_arange_not_supported"
KINDS = {"subscript"}


def check(event: Event, ctx: object) -> list[Finding]:
    tile = event.facts["tile"]
    if tile.buffer not in ("sbuf", "psum") and not (tile.shape and len(tile.shape) >= 2):
        return []
    values = event.facts["index_values"]
    if not any(isinstance(v, IndexV) and v.ndim == 1 for v in values):
        return []
    fixes = _fixes(event, ctx)
    return [Finding(CODE, "indexing with a 1-D nl.arange is not supported; give it an axis: "
                    "nl.arange(n)[:, None] for the partition dim, nl.arange(n)[None, :] for a free dim",
                    event.node, fixes=fixes)]


def _fixes(event: Event, ctx: object) -> list[NodeFix]:
    """Index k of a subscript with a direct ``nl.arange(...)`` call: partition axis first, free axes after."""
    node = event.node
    assert isinstance(node, ast.Subscript)
    keys = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    segment = getattr(ctx, "segment", None)
    if segment is None:
        return []
    edits: list[tuple[ast.AST, str]] = []
    n = len(keys)
    for k, (key, v) in enumerate(zip(keys, event.facts["index_values"])):
        if isinstance(v, IndexV) and v.ndim == 1 and isinstance(key, ast.Call):
            text = segment(key)
            if text is None:
                return []
            if n == 1:
                suffix = "[:, None]"
            else:
                suffix = "[" + ", ".join(":" if j == k else "None" for j in range(n)) + "]"
            edits.append((key, text + suffix))
    return [NodeFix("Give nl.arange a 2-D shape", edits)] if edits else []
