"""A tile created in the body of an ``nl.affine_range`` / ``nl.sequential_range`` loop of a classic kernel and
read after the loop (``err_local_variable_used_out_of_scope``): the classic front end gives each loop body its
own scope, so the name is undefined after the loop although Python would keep the last iteration's tile.

Purely syntactic (no values needed), so it is a static rule. Only names first bound inside the loop to the
result of an ``nl.*`` / ``nisa.*`` call are considered (a name bound before the loop is the documented fix:
declare the buffer first and write into it), and only a read that comes before any rebinding after the loop.
Plain ``range`` / ``static_range`` loops are left alone (unrolled in Python at trace time).
"""

from __future__ import annotations

import ast

from ..finding import Finding
from ..interp import Event, Interpreter

CODE = "err_local_variable_used_out_of_scope"
KINDS = {"loop"}

_SCOPED = ("affine_range", "sequential_range")
_NOT_TILES = {"arange", "mgrid", "ds", "affine_range", "sequential_range", "static_range", "program_id",
              "num_programs", "par_dim", "tile_size", "loop_reduce"}


def check(event: Event, ctx: object) -> list[Finding]:
    loop = event.node
    root = getattr(ctx, "root", None)
    if event.facts.get("kind") not in _SCOPED or getattr(ctx, "generation", "") != "classic" \
            or not isinstance(loop, (ast.For, ast.AsyncFor)) or not isinstance(root, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    tiles = _tiles_bound_in(loop, getattr(ctx, "aliases", {}))
    if not tiles:
        return []
    block = _block_of(root, loop)
    if block is None:
        return []
    before = _bound_before(root, loop)
    after = block[block.index(loop) + 1:]
    findings = []
    for name in sorted(tiles - before):
        use = _first_read(after, name)
        if use is not None:
            findings.append(Finding(CODE, f"Local variable '{name}' is referenced outside of its parent scope: it is "
                                    f"created inside the {event.facts['kind']} loop at line {loop.lineno} and does not "
                                    "exist after it; declare the buffer before the loop and write into it "
                                    f"({name}[...] = ...)", use))
    return findings


def _walk(nodes: list[ast.stmt]) -> list[ast.AST]:
    """Every node of ``nodes``, not descending into nested functions, lambdas or classes."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = list(nodes)
    while todo:
        n = todo.pop()
        out.append(n)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        todo.extend(ast.iter_child_nodes(n))
    return out


def _is_tile_call(value: ast.AST, aliases: dict[str, str]) -> bool:
    if not isinstance(value, ast.Call):
        return False
    parts: list[str] = []
    node = value.func
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases or not parts:
        return False
    found = Interpreter.api(".".join([aliases[node.id]] + parts[::-1]))
    if any(k.arg == "buffer" and "hbm" in ast.dump(k.value) for k in value.keywords):
        return False  # an HBM tensor allocated in a loop is err_shared_hbm_must_in_kernel_level's (hoisting fixes both)
    return found is not None and found[0] in ("nl", "nisa") and found[1] not in _NOT_TILES


def _tiles_bound_in(loop: ast.For | ast.AsyncFor, aliases: dict[str, str]) -> set[str]:
    names: set[str] = set()
    for n in _walk(loop.body):
        if isinstance(n, ast.Assign) and _is_tile_call(n.value, aliases):
            names.update(t.id for t in n.targets if isinstance(t, ast.Name))
        elif isinstance(n, ast.AnnAssign) and n.value is not None and isinstance(n.target, ast.Name) \
                and _is_tile_call(n.value, aliases):
            names.add(n.target.id)
    return names


def _block_of(root: ast.AST, stmt: ast.stmt) -> list[ast.stmt] | None:
    for n in [root] + _walk(list(getattr(root, "body", []))):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(n, field, None)
            if isinstance(block, list) and any(s is stmt for s in block):
                return block
        for h in getattr(n, "handlers", []) or []:
            if any(s is stmt for s in h.body):
                return list(h.body)
    return None


def _bound_before(root: ast.FunctionDef | ast.AsyncFunctionDef, loop: ast.stmt) -> set[str]:
    """Parameters and every name stored anywhere before the loop starts (conservative: any such binding)."""
    a = root.args
    names = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    names.update(x.arg for x in (a.vararg, a.kwarg) if x is not None)
    for n in _walk(root.body):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load) and n.lineno < loop.lineno:
            names.add(n.id)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            names.update(n.names)
    return names


def _first_read(stmts: list[ast.stmt], name: str) -> ast.Name | None:
    """The first read of ``name`` in ``stmts`` in execution order, or None when it is rebound first (or never
    read). A store counts at the end of its statement (``t = f(t)`` reads ``t`` first), a loop target where it is."""
    events: list[tuple[tuple[int, int], int, ast.Name]] = []
    for s in stmts:
        for n in _walk([s]):
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                for t in targets:
                    for m in ast.walk(t):
                        if isinstance(m, ast.Name) and m.id == name and not isinstance(m.ctx, ast.Load):
                            end = (n.end_lineno or n.lineno, n.end_col_offset or 0)
                            events.append((end, 1, m))
            elif isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load):
                events.append(((n.lineno, n.col_offset), 0, n))
            elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
                for m in ast.walk(n.target):
                    if isinstance(m, ast.Name) and m.id == name:
                        events.append(((m.lineno, m.col_offset), 1, m))
    if not events:
        return None
    _, kind, node = min(events, key=lambda e: (e[0], e[1]))
    return node if kind == 0 else None
