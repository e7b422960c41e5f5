"""What is known about the tensors of a kernel buffer: static facts and simulation facts.

Static facts come from the diagnostics' abstract interpreter (``diagnostics.static.interp``): every
name bound to a tile with its shape, dtype and buffer where they are known, and the trip count of
``affine_range(N)``-style loops with a known ``N``. Simulation facts come from the trace of the last
simulation (one entry per allocation/result per executed line); where both exist, the simulation
wins. Used by hover and inlay hints; pure (no LSP), and never raises on user text.
"""

from __future__ import annotations

import ast
import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from nki_agent.toolchain.protocol.jobs import TraceEntry

from ...toolchain.source_facts import is_kernel
from ..static import dotted_name as _dotted

log = logging.getLogger(__name__)

_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]+)?=(?!=)")
LOOP_KINDS = ("affine_range", "sequential_range", "static_range", "range", "tile_range")


@dataclass(frozen=True)
class TensorFact:
    name: str
    line: int  # 1-based
    column: int  # 1-based code-point column of the name (0 when unknown)
    shape: tuple[int | None, ...] | None
    dtype: str | None
    buffer: str | None
    source: str  # static | simulation
    shapes_seen: tuple[tuple[int, ...], ...] = ()  # simulation: distinct shapes over loop iterations
    partition_axis: int = 0  # the axis holding the partitions (an ``nl.par_dim`` in the allocation moves it)


@dataclass(frozen=True)
class LoopFact:
    line: int
    end_column: int  # 1-based column just after the loop's iterable call
    kind: str
    trips: int


@dataclass(frozen=True)
class KernelFact:
    name: str
    line: int  # the def line
    column: int
    params: tuple[tuple[str, int, int], ...]  # (name, line, column)


@dataclass
class Facts:
    tensors: list[TensorFact] = field(default_factory=list)
    loops: list[LoopFact] = field(default_factory=list)
    kernels: list[KernelFact] = field(default_factory=list)


def _char_col(lines: list[str], line: int, byte_col: int) -> int:
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    return len(text.encode("utf-8")[:byte_col].decode("utf-8", "ignore")) + 1


def kernels_of(module: ast.Module, lines: list[str]) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, KernelFact]]:
    out = []
    for node in ast.walk(module):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_kernel(node):
            params = tuple((a.arg, a.lineno, _char_col(lines, a.lineno, a.col_offset))
                           for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs)
            # the name's column: after "def " on the def line
            def_text = lines[node.lineno - 1] if node.lineno <= len(lines) else ""
            col = def_text.find(node.name, def_text.find("def")) + 1
            out.append((node, KernelFact(node.name, node.lineno, max(col, 1), params)))
    out.sort(key=lambda x: x[1].line)
    return out


# Per-function facts, position-independent (lines relative to the function's text): while the user types,
# only the function being edited is analysed again. Keyed by everything the analysis reads: the context
# (imports, constants, API generation, target, input shapes), then the function's text.
@dataclass(frozen=True)
class _Piece:
    kernels: tuple[KernelFact, ...]
    tensors: tuple[TensorFact, ...]
    loops: tuple[LoopFact, ...]


_PIECES: dict[tuple[Any, ...], dict[str, _Piece]] = {}  # in least-recently-used order
_PIECES_LOCK = threading.Lock()  # facts are computed in a thread pool
_PIECES_MAX = 2048  # functions per context; a kernel file has tens
_CONTEXTS_MAX = 16  # contexts kept at once: open files x targets, and a few recent import/constant edits


def clear_cache() -> None:
    """Forget every cached per-function fact (the next computation is a cold one)."""
    with _PIECES_LOCK:
        _PIECES.clear()


def _pieces_for(context: tuple[Any, ...]) -> dict[str, _Piece]:
    with _PIECES_LOCK:
        pieces = _PIECES.pop(context, None)
        if pieces is None:
            pieces = {}
            while len(_PIECES) >= _CONTEXTS_MAX:
                del _PIECES[next(iter(_PIECES))]
        _PIECES[context] = pieces
        return pieces


def _record(node: ast.FunctionDef | ast.AsyncFunctionDef, kfact: KernelFact, lines: list[str], info: Any,
            input_shapes: dict[str, dict[str, tuple[int, ...]]] | None, facts: Facts) -> bool:
    """Run the abstract interpreter over one kernel, appending its tensors and loops; False if it crashed."""
    from ..static.interp import Context, Interpreter
    from ..static.values import TileV, TupleV, known_int

    params = {a.arg: a for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs}

    class Recorder(Interpreter):  # type: ignore[misc, valid-type]
        def bind(self, node: ast.expr, value: Any) -> None:
            super().bind(node, value)
            if isinstance(node, ast.Name) and isinstance(value, TileV) and (value.certain or value.shape is not None):
                facts.tensors.append(TensorFact(node.id, node.lineno, _char_col(lines, node.lineno, node.col_offset),
                                                value.shape, value.dtype, value.buffer, "static",
                                                partition_axis=value.par_axis))

        def assertion(self, s: ast.Assert) -> None:
            super().assertion(s)
            # ``assert x.shape == (K, N * 4)`` on a parameter: the shape its inputs must have (what "Add input
            # shapes" pre-fills), a fact of the parameter at the def line
            t = s.test
            if not (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq)
                    and isinstance(t.left, ast.Attribute) and t.left.attr == "shape"
                    and isinstance(t.left.value, ast.Name)):
                return
            arg = params.get(t.left.value.id)
            implied = self.expr(t.comparators[0])
            dims = [known_int(v) for v in implied.items] if isinstance(implied, TupleV) else []
            if arg is not None and any(d is not None for d in dims) and all(d is None or d > 0 for d in dims):
                facts.tensors.append(TensorFact(arg.arg, arg.lineno, _char_col(lines, arg.lineno, arg.col_offset),
                                                tuple(dims), None, None, "static"))

        def loop(self, s: ast.For | ast.AsyncFor) -> None:
            if isinstance(s.iter, ast.Call) and s.iter.args and not s.iter.keywords:
                kind = _dotted(s.iter.func).split(".")[-1]
                if kind in LOOP_KINDS:
                    vals = [known_int(self.expr(a)) for a in s.iter.args]
                    if all(v is not None for v in vals) and len(vals) <= 3:
                        r = range(*vals)  # type: ignore[arg-type]
                        end = s.iter.end_lineno or s.iter.lineno
                        facts.loops.append(LoopFact(end, _char_col(lines, end, s.iter.end_col_offset or 0), kind, len(r)))
            super().loop(s)

    is_kernel = any(k is kfact for k in facts.kernels)  # else an NKI helper function: its parameters are unknown
    ctx = Context(aliases=info.aliases, constants=info.constants, generation=info.generation, is_kernel=is_kernel,
                  param_shapes=dict((input_shapes or {}).get(kfact.name, {})) if is_kernel else {})
    try:
        Recorder(ctx, lambda e: None).run(node)
    except Exception:  # a checker bug must not take hover down
        log.exception("static facts failed for %s", kfact.name)
        return False
    return True


def _helpers(module: ast.Module, aliases: dict[str, str], kernels: set[int]) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Functions outside any kernel that call NKI (a kernel's helpers): their tiles get facts too."""
    from ...toolchain.source_facts import namespace_of

    nki_names = {local for local, qual in aliases.items() if namespace_of(qual) in ("nl", "nisa")}
    out: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    stack: list[ast.AST] = [module]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if id(child) in kernels:
                    continue  # the kernel's walk covers what it can; nested defs are its own business
                if any(isinstance(n, ast.Name) and n.id in nki_names for n in ast.walk(child)):
                    out.append(child)
                    continue
            if not isinstance(child, ast.expr):
                stack.append(child)
    return sorted(out, key=lambda f: f.lineno)


def analysed(module: ast.Module, kernels: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, KernelFact]],
             aliases: dict[str, str]) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, KernelFact]]:
    """The functions whose tiles get facts, in line order: the kernels and the NKI helpers (a helper's
    ``KernelFact`` is not one of ``kernels``, so ``_record`` treats its parameters as unknown)."""
    helpers = [(fn, KernelFact(fn.name, fn.lineno, 0, ())) for fn in _helpers(module, aliases, {id(f) for f, _ in kernels})]
    return sorted(kernels + helpers, key=lambda pair: (pair[0].lineno, pair[0].col_offset))


def _unit_piece(text: str, info: Any, input_shapes: dict[str, dict[str, tuple[int, ...]]] | None,
                node: ast.FunctionDef | ast.AsyncFunctionDef | None = None) -> tuple[_Piece, bool]:
    """Facts of one function's text (lines relative to ``text``, after an ``if 1:`` line when indented),
    and whether they may be cached (no kernel crashed). ``node``: the layout's parse of ``text``, if any."""
    indented = text[:1] in (" ", "\t", "\f")
    parsed = "if 1:\n" + text if indented else text
    if node is not None and not indented:
        module = ast.Module(body=[node], type_ignores=[])
    else:
        try:
            module = ast.parse(parsed)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            return _Piece((), (), ()), True
    lines = parsed.split("\n")
    kernels = kernels_of(module, lines)
    facts = Facts(kernels=[k for _, k in kernels])
    ok = True
    if info.generation:
        for fn, kfact in analysed(module, kernels, info.aliases):
            ok = _record(fn, kfact, lines, info, input_shapes, facts) and ok
    return _Piece(tuple(facts.kernels), tuple(facts.tensors), tuple(facts.loops)), ok


def _shifted(piece: _Piece, delta: int, facts: Facts) -> None:
    if delta == 0:
        facts.kernels.extend(piece.kernels)
        facts.tensors.extend(piece.tensors)
        facts.loops.extend(piece.loops)
        return
    for k in piece.kernels:
        facts.kernels.append(replace(k, line=k.line + delta,
                                     params=tuple((n, line + delta, col) for n, line, col in k.params)))
    facts.tensors.extend(replace(t, line=t.line + delta) for t in piece.tensors)
    facts.loops.extend(replace(lp, line=lp.line + delta) for lp in piece.loops)


def static_facts(text: str, target: str = "trn1", input_shapes: dict[str, dict[str, tuple[int, ...]]] | None = None) -> Facts:
    """Facts of a buffer that parses as Python (otherwise empty, as-you-type text is often broken).

    The file is cut into chunks by the checker's ``source.layout`` (each chunk parsed on its own, cached
    by its text), and the facts of each outermost function are cached by its text and the file's context,
    so after an edit only the edited function is analysed again; the result equals a from-scratch
    computation (``tests/server/test_facts_incremental.py``). Kernels are found inside the functions the
    layout sees (column-0 ones, and those in classes and ``if``/``try``/``with`` blocks), nested ones too."""
    facts = Facts()
    try:
        from ..static import source
        from ..static.interp import Context, Interpreter  # noqa: F401 -- fail early if moved
        from ..static.values import TileV, known_int  # noqa: F401
    except ImportError:  # the checker's internals moved: hover degrades to simulation facts
        log.exception("static facts unavailable")
        return facts
    try:
        found = source.layout(text)
    except Exception:  # never raise on user text
        log.exception("static facts: layout failed")
        return facts
    if not found.valid:
        return facts
    info = found.info
    shapes = tuple(sorted((k, tuple(sorted(v.items()))) for k, v in (input_shapes or {}).items()))
    pieces = _pieces_for((tuple(sorted(info.aliases.items())), tuple(sorted(info.constants.items())),
                          info.generation, target, shapes))
    end = 0  # last line of the last outermost function: the functions inside it were walked with it
    for unit in found.units:
        if unit.start_line <= end:
            continue
        end = unit.start_line + unit.text.count("\n")
        piece = pieces.get(unit.text)
        if piece is None:
            piece, ok = _unit_piece(unit.text, info, input_shapes, unit.node)
            if ok:
                with _PIECES_LOCK:
                    if len(pieces) >= _PIECES_MAX:
                        pieces.clear()
                    pieces[unit.text] = piece
        indented = unit.text[:1] in (" ", "\t", "\f")
        _shifted(piece, unit.start_line - 1 - (1 if indented else 0), facts)
    return facts


def trace_facts(trace: Sequence[TraceEntry], lines: list[str]) -> list[TensorFact]:
    """One fact per (line, name) observed by the simulator. The name is the variable the line assigns (the
    simulator's own label, e.g. ``a_tile`` for a masked load of ``a`` or a ``name=``, is not what the user
    hovers), else the simulator's label."""
    grouped: dict[tuple[int, str], list[TraceEntry]] = {}
    for entry in trace or ():
        line = entry.line
        name = entry.name
        if 0 < line <= len(lines):
            m = _ASSIGN.match(lines[line - 1])
            name = m.group(1) if m else name
        if name:
            grouped.setdefault((line, name), []).append(entry)
    out = []
    for (line, name), entries in grouped.items():
        shapes = tuple(dict.fromkeys(tuple(e.shape) for e in entries))
        last = entries[-1]
        text = lines[line - 1] if 0 < line <= len(lines) else ""
        col = text.find(name) + 1
        out.append(TensorFact(name, line, col, tuple(last.shape), last.dtype, last.buffer, "simulation", shapes))
    return out


def fact_at(tensors: list[TensorFact], name: str, line: int) -> TensorFact | None:
    """The best fact for ``name`` used at ``line``: the latest binding at or above it, simulation first."""
    best: TensorFact | None = None
    for f in tensors:
        if f.name != name:
            continue
        key = (f.line <= line, f.line if f.line <= line else -f.line, f.source == "simulation")
        if best is None or key > (best.line <= line, best.line if best.line <= line else -best.line,
                                  best.source == "simulation"):
            best = f
    return best


def simulation_facts(trace: Sequence[TraceEntry], run_text: str | None, text: str,
                     static: Sequence[TensorFact] = ()) -> list[TensorFact]:
    """The facts of a run's trace placed on the current buffer ``text``: lines follow the edits made since
    the run (``diagnostics.cost_view.line_map``; an edited line loses its facts), and each fact takes the
    partition axis of the static fact of the same name and line (the trace records shapes, not ``par_dim``)."""
    from ..cost_view import line_map

    lines = text.split("\n")
    if run_text is not None and run_text != text:
        old_lines = run_text.split("\n")
        moved = line_map(run_text, text)
        out = []
        for f in trace_facts(trace, old_lines):
            line = moved(f.line)
            if line is not None:
                out.append(replace(f, line=line))
    else:
        out = trace_facts(trace, lines)
    axes = {(f.line, f.name): (f.partition_axis, len(f.shape)) for f in static if f.shape is not None}
    for k, f in enumerate(out):
        axis, rank = axes.get((f.line, f.name), (0, -1))
        if axis and f.shape is not None and rank == len(f.shape):
            out[k] = replace(f, partition_axis=axis)
    return out
