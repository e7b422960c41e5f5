"""A kernel computes tiles but returns a ``shared_hbm`` tensor it never mentions between its allocation and
the ``return`` (``err_tensor_output_not_written_to``): nothing can have written it. (Stubs that compute
no tile at all are left alone.)

Fix (only when mechanical): the statement right before ``return`` produces an SBUF tile of exactly the
output's shape -> store it (``nl.store(out, y)``; ``nisa.dma_copy(dst=out, src=y)`` in the new API).
"""

from __future__ import annotations

import ast
import dataclasses

from ..finding import Finding, NodeFix
from ..interp import Context, Event, Interpreter
from ..values import TileV, Value
from .psum_to_hbm import alias_of, prefixed

CODE = "err_tensor_output_not_written_to"
KINDS = {"alloc"}


def check(event: Event, ctx: object) -> list[Finding]:
    f = event.facts
    root, statement_of = getattr(ctx, "root", None), getattr(ctx, "statement_of", None)
    if not f["shared"] or f["name"] != "ndarray" or f["loops"] or not getattr(ctx, "is_kernel", False) \
            or not isinstance(root, (ast.FunctionDef, ast.AsyncFunctionDef)) or statement_of is None:
        return []
    # cheap checks first: this runs for every kernel's output allocation while the user types
    stmt = next((s for s in root.body if isinstance(s, ast.Assign) and s.value is event.node), None)
    if not (stmt is not None and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return []
    var = stmt.targets[0].id
    ret = root.body[-1]
    if not isinstance(ret, ast.Return) or var not in _returned_names(ret.value):
        return []
    lines = getattr(ctx, "lines", [])[root.lineno - 1: root.end_lineno]
    if _mentions("\n".join(lines), var, 2) > 2:
        return []  # mentioned elsewhere (a store, a view, an alias ...): something may write it
    # any other mention (a store, a view, an alias, a helper call, a closure) may write it: stay silent
    mentions = [n for n in ast.walk(root) if isinstance(n, ast.Name) and n.id == var]
    if len(mentions) != 2 or any(isinstance(n, ast.Global | ast.Nonlocal) for n in ast.walk(root)):
        return []
    env = _value_at_return(root, ctx)
    if not any(isinstance(v, TileV) and v.certain and not v.is_param and v.buffer != "hbm" for v in env.values()):
        return []  # a stub that computes nothing (yet): not worth a squiggle
    return [Finding(CODE, f"kernel output `{var}` is returned but never written; store the result into it "
                    "(nl.store / nisa.dma_copy) before returning", event.node,
                    fixes=_fix(var, f["shape"], ret, root, env, ctx))]


def _mentions(text: str, word: str, limit: int) -> int:
    """How many times ``word`` occurs in ``text`` as a whole identifier, counting up to ``limit + 1``
    (a ``str.find`` scan: a regex with word boundaries costs ~50 us per kernel, on every check)."""
    n, pos = 0, text.find(word)
    while pos >= 0 and n <= limit:
        end = pos + len(word)
        before, after = text[pos - 1: pos], text[end: end + 1]
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            n += 1
        pos = text.find(word, end)
    return n


def _returned_names(value: ast.expr | None) -> list[str]:
    if isinstance(value, ast.Name):
        return [value.id]
    if isinstance(value, (ast.Tuple, ast.List)):
        return [e.id for e in value.elts if isinstance(e, ast.Name)]
    return []


def _fix(var: str, shape: tuple[int | None, ...] | None, ret: ast.Return,
         root: ast.FunctionDef | ast.AsyncFunctionDef, env: dict[str, Value], ctx: object) -> list[NodeFix]:
    text, aliases, generation = getattr(ctx, "text", ""), getattr(ctx, "aliases", {}), getattr(ctx, "generation", "")
    if not text or shape is None or any(d is None for d in shape) or len(root.body) < 2:
        return []
    before = root.body[-2]
    produced: str | None = None
    if isinstance(before, ast.Assign) and len(before.targets) == 1 and isinstance(before.targets[0], ast.Name):
        produced = before.targets[0].id  # y = nl.exp(x)
    elif isinstance(before, ast.Expr) and isinstance(before.value, ast.Call) and generation == "new":
        call = before.value  # nisa.op(dst, ...) writes its dst
        dst = next((k.value for k in call.keywords if k.arg == "dst"), call.args[0] if call.args else None)
        produced = dst.id if isinstance(dst, ast.Name) else None
    if produced is None or produced == var:
        return []
    value = env.get(produced)
    if not (isinstance(value, TileV) and value.certain and not value.is_param and value.shape == shape
            and value.buffer in ("sbuf", None)):
        return []
    root_name = "nki.language" if generation == "new" else "neuronxcc.nki.language"
    nl = alias_of(aliases, root_name)
    if generation == "new":
        nisa = alias_of(aliases, "nki.isa")
        if nisa is None or value.buffer != "sbuf":
            return []
        line = f"{nisa}.dma_copy(dst={var}, src={produced})"
    elif nl is not None:
        line = f"{nl}.store({var}, {produced})"
    else:
        return []
    return [NodeFix(f"Store `{produced}` into the output `{var}`", [(ret, prefixed(ret, text, [line]))])]


def _value_at_return(root: ast.FunctionDef | ast.AsyncFunctionDef, ctx: object) -> dict[str, Value]:
    """The abstract environment at the end of the function (a silent second walk)."""
    if not isinstance(ctx, Context) or not dataclasses.is_dataclass(ctx):
        return {}
    local = dataclasses.replace(ctx, loops=[])
    interp = Interpreter(local, lambda _e: None)
    interp.run(root)
    return interp.env
