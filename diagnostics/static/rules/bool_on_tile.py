"""``and``/``or``/``not``/``if`` on tiles or ``nl.arange`` values (``err_ambiguous_tensor_truth_value``,
``err_dynamic_control_flow_not_supported``, ``err_control_flow_condition_depending_on_arange``)."""

from __future__ import annotations

import ast

from ..finding import Finding, NodeFix
from ..interp import Event
from ..values import IndexV, TileV

KINDS = {"truth"}
CODE = "err_ambiguous_tensor_truth_value"


def check(event: Event, ctx: object) -> list[Finding]:
    where, value = event.facts["where"], event.facts["value"]
    if isinstance(value, IndexV):
        if where in ("and", "or", "not"):  # a mask combined with Python's and/or/not
            symbol = {"and": "&", "or": "|", "not": "~"}[where]
            fixes = _bool_op_fix(event.node, ctx) if isinstance(event.node, ast.BoolOp) else []
            return [Finding("err_control_flow_condition_depending_on_arange",
                            f"`{where}` on nl.arange conditions (e.g. inside mask=): use `{symbol}` — Python's "
                            f"`{where}` needs a single truth value", event.node, fixes=fixes)]
        return [Finding("err_control_flow_condition_depending_on_arange",
                        "Python control flow cannot depend on nl.arange/nl.mgrid values; use mask= instead", event.node)]
    if not isinstance(value, TileV):
        return []
    if where in ("and", "or", "not"):
        fixes = _bool_op_fix(event.node, ctx) if isinstance(event.node, ast.BoolOp) else []
        return [Finding(CODE, f"`{where}` needs a single truth value, but this operand is a tile; use "
                        "& | ~ for element-wise logic (nl.logical_and/or/not)", event.node, fixes=fixes)]
    return [Finding("err_dynamic_control_flow_not_supported",
                    "Python control flow cannot depend on tile values (they exist only on the device); "
                    "use masks, nl.where or nisa.affine_select", event.node)]


def _bool_op_fix(node: ast.BoolOp, ctx: object) -> list[NodeFix]:
    """``a and b`` -> ``(a) & (b)``; ``a or b`` -> ``(a) | (b)``."""
    segment = getattr(ctx, "segment", None)
    if segment is None:
        return []
    parts = [segment(v) for v in node.values]
    if any(p is None for p in parts):
        return []
    op = " & " if isinstance(node.op, ast.And) else " | "
    text = op.join(p if isinstance(v, (ast.Name, ast.Call, ast.Attribute, ast.Subscript)) else f"({p})"
                   for p, v in zip(parts, node.values))
    return [NodeFix(f"Replace `{'and' if op == ' & ' else 'or'}` with `{op.strip()}`", [(node, text)])]
