"""More producers of fixes for problems a run finds (used by ``sim_fixes.fixes_for``), one per function:

- ``arange_through_names``: ``err_1d_arange_not_supported`` where the 1-D ``nl.arange`` reaches the
  subscript through variables (``i_p = nl.arange(P)`` … ``rows = t * P + i_p`` … ``a[rows, i_f]``):
  the defining ``arange`` gets ``[:, None]`` (first index) or ``[None, :]`` (last index of two).
- ``mask_bool_ops``: ``err_control_flow_condition_depending_on_arange`` from ``and``/``or`` between
  comparisons inside a ``mask=`` → ``&``/``|`` (each operand parenthesised).
- ``psum_fp32`` / ``hoist_shared_hbm``: a wrong result (or an unsupported PSUM dtype) from a low-precision
  PSUM accumulator / an HBM output allocated inside a loop (the new API raises nothing for it).
- ``tile_constant``: a partition/operand limit exceeded because a tile-size constant is above 128
  (``P = 256``) → ``P = nl.tile_size.pmax``.
- ``restore_output_store``: an output allocated and returned but never written
  (``err_tensor_output_not_written_to``) → store the block's last tile at the index its input was loaded from.
- ``new_api_imports``: a file importing the classic ``neuronxcc.nki`` whose ISA calls use the new
  ``dst=`` form (``sim_invalid_argument``) → import the new ``nki`` modules under the same names.

Each returns candidate fixes only; ``sim_fixes.verified`` (or the agent's verify) decides.
"""

from __future__ import annotations

import ast
import re

from .ast_edit import function_at, node_span
from .model import Fix, TextEdit

_CLASSIC_IMPORT = re.compile(r"^(\s*)(import|from)\s+neuronxcc\.(nki\S*)(.*)$")
MAX_DEPTH = 4  # variable hops from a subscript back to its arange; real kernels need one or two


def _segment(text: str, node: ast.AST) -> str:
    return ast.get_source_segment(text, node) or ""


def _is_arange(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "arange"


def _assignments(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, list[ast.expr]]:
    out: dict[str, list[ast.expr]] = {}
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            out.setdefault(n.targets[0].id, []).append(n.value)
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and isinstance(n.target, ast.Name):
            out.setdefault(n.target.id, []).append(n.value or ast.Constant(None))
    return out


def _aranges(expr: ast.expr, assigns: dict[str, list[ast.expr]], depth: int = 0) -> list[ast.Call]:
    """The bare 1-D ``arange`` calls an index expression is built from (through single assignments)."""
    found: list[ast.Call] = []
    for n in ast.walk(expr):
        if _is_arange(n):
            found.append(n)  # type: ignore[arg-type]
        elif isinstance(n, ast.Name) and depth < MAX_DEPTH and len(assigns.get(n.id, [])) == 1:
            found.extend(_aranges(assigns[n.id][0], assigns, depth + 1))
    return found


def _subscripted(module: ast.Module) -> set[int]:
    """ids of arange calls that are already indexed (``arange(n)[:, None]``): not 1-D."""
    return {id(n.value) for n in ast.walk(module) if isinstance(n, ast.Subscript) and _is_arange(n.value)}


def arange_through_names(module: ast.Module, text: str, line: int) -> list[Fix]:
    fn = function_at(module, line)
    if fn is None:
        return []
    assigns = _assignments(fn)
    indexed = _subscripted(module)
    edits: dict[tuple[int, int, int, int], TextEdit] = {}
    for n in ast.walk(fn):
        if not (isinstance(n, ast.Subscript) and getattr(n, "lineno", 0) <= line <= (n.end_lineno or 0)):
            continue
        elts = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
        if len(elts) != 2:
            continue  # only the [partition, free] case is unambiguous
        for axis, elt in enumerate(elts):
            for call in _aranges(elt, assigns):
                if id(call) in indexed:
                    continue
                span = node_span(text, call)
                suffix = "[:, None]" if axis == 0 else "[None, :]"
                edit = TextEdit(*span, _segment(text, call) + suffix)
                if span in edits and edits[span].new_text != edit.new_text:
                    return []  # the same arange feeds both axes: no mechanical answer
                edits[span] = edit
    if not edits:
        return []
    return [Fix("Give the 1-D nl.arange index a partition/free axis", tuple(sorted(edits.values(),
                                                                                  key=lambda e: (e.line, e.column))))]


def mask_bool_ops(module: ast.Module, text: str, line: int) -> list[Fix]:
    edits = []
    for n in ast.walk(module):
        if not isinstance(n, ast.Call):
            continue
        for kw in n.keywords:
            if kw.arg != "mask":
                continue
            for b in ast.walk(kw.value):
                if isinstance(b, ast.BoolOp) and b.lineno <= line <= (b.end_lineno or b.lineno):
                    op = " & " if isinstance(b.op, ast.And) else " | "
                    parts = [f"({_segment(text, v)})" if not _segment(text, v).startswith("(") else _segment(text, v)
                             for v in b.values]
                    # a BoolOp binds loosest: it is the whole mask or already in parentheses
                    edits.append(TextEdit(*node_span(text, b), op.join(parts)))
                    break
    if not edits:
        return []
    return [Fix("Combine mask conditions with & / | (and/or ask Python for one truth value)",
                tuple(sorted(edits, key=lambda e: (e.line, e.column))))]


def new_api_imports(text: str) -> list[Fix]:
    """Classic imports → new ``nki`` imports, for a file whose ISA calls are already in the new form."""
    if not re.search(r"\bnisa\.\w+\(\s*dst\s*=|\.isa\.\w+\(\s*dst\s*=", text):
        return []
    edits = []
    for n, raw in enumerate(text.split("\n"), 1):
        m = _CLASSIC_IMPORT.match(raw)
        if m:
            new = f"{m.group(1)}{m.group(2)} {m.group(3)}{m.group(4)}"
            edits.append(TextEdit(n, 1, n, len(raw) + 1, new))
    if not edits:
        return []
    return [Fix("Import the new `nki` API (the kernel already uses its dst= form)", tuple(edits))]


def _buffer_of(call: ast.Call) -> str:
    for kw in call.keywords:
        if kw.arg == "buffer" and isinstance(kw.value, ast.Attribute):
            return kw.value.attr
    return ""


def _alloc_calls(module: ast.Module) -> list[ast.Call]:
    return [n for n in ast.walk(module) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("ndarray", "zeros", "empty") and _buffer_of(n)]


def psum_fp32(module: ast.Module, text: str) -> list[Fix]:
    """PSUM tiles allocated in a low-precision dtype → fp32 (matmuls accumulate in fp32 PSUM)."""
    edits = []
    for call in _alloc_calls(module):
        if _buffer_of(call) != "psum":
            continue
        dtype = next((kw.value for kw in call.keywords if kw.arg == "dtype"), None)
        if dtype is None and len(call.args) >= 2:
            dtype = call.args[1]
        if isinstance(dtype, ast.Attribute) and dtype.attr in ("bfloat16", "float16", "float8_e4m3", "float8_e5m2",
                                                                "tfloat32"):
            edits.append(TextEdit(*node_span(text, dtype), _segment(text, dtype.value) + ".float32"))
    if not edits:
        return []
    return [Fix("Accumulate in fp32 PSUM tiles", tuple(edits))]


def hoist_shared_hbm(module: ast.Module, text: str) -> list[Fix]:
    """One-line ``x = nl.ndarray(..., buffer=nl.shared_hbm)`` inside a loop → just above the outermost loop
    (an output allocated per iteration loses every iteration's writes but the last)."""
    lines = text.split("\n")
    fixes = []
    for fn in (n for n in ast.walk(module) if isinstance(n, ast.FunctionDef)):
        for loop in (n for n in fn.body if isinstance(n, (ast.For, ast.While))):
            for stmt in ast.walk(loop):
                if not (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
                        and stmt.value in _alloc_calls(module) and _buffer_of(stmt.value) in ("shared_hbm", "hbm")
                        and stmt.lineno == stmt.end_lineno):
                    continue
                moved = lines[stmt.lineno - 1].strip()
                indent = lines[loop.lineno - 1][: loop.col_offset]
                new_lines = list(lines)
                del new_lines[stmt.lineno - 1]
                new_lines.insert(loop.lineno - 1, indent + moved)
                new = "\n".join(new_lines)
                span_end = max(loop.end_lineno or loop.lineno, stmt.lineno)
                old_block = lines[loop.lineno - 1: span_end]
                new_block = new.split("\n")[loop.lineno - 1: span_end]
                fixes.append(Fix("Hoist the HBM output allocation out of the loop",
                                 (TextEdit(loop.lineno, 1, span_end, len(old_block[-1]) + 1, "\n".join(new_block)),)))
    return fixes


PMAX = 128  # partitions per tile on every Trainium generation


def _language_alias(module: ast.Module) -> str | None:
    for n in ast.walk(module):
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.name in ("neuronxcc.nki.language", "nki.language") and a.asname:
                    return a.asname
        elif isinstance(n, ast.ImportFrom) and n.module in ("neuronxcc.nki", "nki"):
            for a in n.names:
                if a.name == "language":
                    return a.asname or a.name
    return None


def tile_constant(module: ast.Module, text: str, line: int | None = None) -> list[Fix]:
    """``P = 256`` (a tile-size constant above the partition limit, used to index or shape tiles) →
    ``P = nl.tile_size.pmax``: the loops derived from ``P`` then cover the same rows in 128-row tiles.
    With the error's ``line``, only constants in the partition (first) index there are candidates."""
    nl = _language_alias(module)
    used_in_tiles: set[str] = set()
    for n in ast.walk(module):
        if isinstance(n, (ast.Subscript, ast.Call, ast.Tuple)):
            used_in_tiles.update(x.id for x in ast.walk(n) if isinstance(x, ast.Name))
    if line is not None:
        at_line: set[str] = set()
        for n in ast.walk(module):
            if isinstance(n, ast.Subscript) and n.lineno <= line <= (n.end_lineno or n.lineno):
                elts = n.slice.elts if isinstance(n.slice, ast.Tuple) and n.slice.elts else [n.slice]
                first = next((e for e in elts if isinstance(e, ast.Slice)), elts[0])  # x[b, rows, :]: rows
                at_line.update(x.id for x in ast.walk(first) if isinstance(x, ast.Name))
        fn = function_at(module, line)
        assigns = _assignments(fn) if fn is not None else {}
        frontier = set(at_line)
        for _ in range(MAX_DEPTH):  # follow `rows = t * P + i_p` back to `P`
            frontier = {x.id for name in frontier if len(assigns.get(name, [])) == 1
                        for x in ast.walk(assigns[name][0]) if isinstance(x, ast.Name)} - at_line
            at_line |= frontier
        if at_line & used_in_tiles:
            used_in_tiles &= at_line
    fixes = []
    for n in ast.walk(module):
        if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                and isinstance(n.value, ast.Constant) and type(n.value.value) is int
                and n.value.value > PMAX and n.value.value % PMAX == 0 and n.targets[0].id in used_in_tiles):
            new = f"{nl}.tile_size.pmax" if nl else str(PMAX)
            fixes.append(Fix(f"Use {PMAX}-partition tiles ({n.targets[0].id} = {new})",
                             (TextEdit(*node_span(text, n.value), new),)))
    return fixes


def _writes_to(module: ast.AST, name: str) -> bool:
    for n in ast.walk(module):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("store", "dma_copy"):
            dst = n.args[0] if n.args else next((k.value for k in n.keywords if k.arg == "dst"), None)
            base = dst.value if isinstance(dst, ast.Subscript) else dst
            if isinstance(base, ast.Name) and base.id == name:
                return True
    return False


def _load_of(stmt: ast.stmt) -> tuple[ast.Subscript, ast.expr | None] | None:
    """(HBM subscript read, its mask) of ``t = nl.load(x[...], mask=...)`` or ``nisa.dma_copy(dst=t, src=x[...])``."""
    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Attribute) \
            and stmt.value.func.attr == "load" and stmt.value.args and isinstance(stmt.value.args[0], ast.Subscript):
        mask = next((k.value for k in stmt.value.keywords if k.arg == "mask"), None)
        return stmt.value.args[0], mask
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Attribute) \
            and stmt.value.func.attr == "dma_copy":
        kw = {k.arg: k.value for k in stmt.value.keywords}
        src = kw.get("src")
        if isinstance(src, ast.Subscript) and isinstance(kw.get("dst"), ast.Name):
            return src, None
    return None


def _last_tile(body: list[ast.stmt]) -> str | None:
    """The tile the block computed last (an assignment target or a ``dst=`` of an ISA call)."""
    for stmt in reversed(body):
        if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
            return stmt.targets[0].id
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            return stmt.target.id
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            dst = next((k.value for k in stmt.value.keywords if k.arg == "dst"), None)
            if isinstance(dst, ast.Name):
                return dst.id
    return None


def restore_output_store(module: ast.Module, text: str) -> list[Fix]:
    """An output that is allocated and returned but never written: store the block's last tile into it at
    the index the block loaded its input from (one candidate per distinct load index; verification picks)."""
    lines = text.split("\n")
    fixes: list[Fix] = []
    for fn in (n for n in ast.walk(module) if isinstance(n, ast.FunctionDef)):
        returned = {n.value.id for n in ast.walk(fn) if isinstance(n, ast.Return) and isinstance(n.value, ast.Name)}
        outputs = [t.id for n in ast.walk(fn) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                   and n.value in _alloc_calls(module) and _buffer_of(n.value) in ("shared_hbm", "hbm")
                   for t in n.targets if isinstance(t, ast.Name) and t.id in returned]
        missing = [o for o in outputs if not _writes_to(fn, o)]
        if len(missing) != 1:
            continue
        out_name = missing[0]
        bodies = [n.body for n in ast.walk(fn) if isinstance(n, (ast.For, ast.While))] or [fn.body]
        body = max(bodies, key=lambda b: max(getattr(s, "end_lineno", 0) or 0 for s in b))  # the innermost-last
        loads = [x for x in (_load_of(s) for s in body) if x is not None]
        tile = _last_tile(body)
        if not loads or tile is None:
            continue
        classic = "neuronxcc" in text
        last = body[-1]
        indent = lines[last.lineno - 1][: last.col_offset]
        seen: set[str] = set()
        for sub, mask in loads:
            index = _segment(text, sub.slice)
            if index in seen or len(seen) >= 3:
                continue
            seen.add(index)
            masked = f", mask={_segment(text, mask)}" if mask is not None else ""
            stmt = (f"nl.store({out_name}[{index}], value={tile}{masked})" if classic else
                    f"nisa.dma_copy(dst={out_name}[{index}], src={tile})")
            end = last.end_lineno or last.lineno
            fixes.append(Fix(f"Store {tile} into the output {out_name}",
                             (TextEdit(end, len(lines[end - 1]) + 1, end, len(lines[end - 1]) + 1,
                                       "\n" + indent + stmt),)))
    return fixes
