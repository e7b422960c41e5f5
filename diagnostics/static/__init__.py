"""As-you-type static checks of NKI kernels: ``check_text(path, text)`` -> diagnostics, no execution.

Pipeline: ``source.layout`` cuts the file into chunks at top-level definitions and finds its imports,
constants and functions (``ast`` per chunk, tree-sitter for the intact functions of a chunk that does
not parse); every function is parsed on its own and abstractly interpreted (``interp.py``); rules
(``rules/``, one file each) turn the events into findings; this module places them in the file and
converts them to the shared ``Diagnostic`` model. A rule that crashes costs one informational
diagnostic, never the others.

A function's diagnostics depend only on its own text and on the file's context (imports, constants,
column-0 ``NAME = "string"`` lines, settings), so they are cached by exactly that, position-independent:
while the user types, only the function being edited is parsed and analysed again, and a check after
any sequence of edits equals a check from scratch (``tests/diagnostics/test_static_incremental.py``).
"""

from __future__ import annotations

import ast
import dataclasses
import gc
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from ...toolchain.errors import doc_url
from ..model import Diagnostic, Fix, TextEdit
from . import rules as rules_pkg
from . import source
from .finding import Finding
from .interp import Context, Event, Interpreter
from .rules import classic_on_new_sdk
from .source import SourceInfo, Unit, layout

SOURCE = "nki-check"
MAX_BYTES = 2 * 1024 * 1024  # as-you-type budget: kernel files are KBs; larger files get one info note
KERNEL_DECORATORS = ("jit", "trace", "baremetal", "benchmark", "simulate_kernel", "nki_jit", "profile")


@dataclass
class Settings:
    """What the user told us (target, and the API generation their SDK accepts)."""

    target: str = "trn1"
    sdk_generation: str = ""  # "new" when the installed SDK rejects classic kernels (NKI >= 0.4)
    # kernel name -> parameter -> shape, e.g. from the task's get_inputs() (the "rank-aware" facts)
    input_shapes: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict)


@dataclass
class FunctionContext(Context):
    """Context of one function: adds source access for fixes.

    ``text`` is the function's own source (``root``'s positions refer to it; a nested function's comes
    after an ``if 1:`` line, so its columns are the file's), followed by the file's column-0
    ``NAME = "string"`` lines (e.g. a task's ``TARGET = "trn3"``): the only module text a rule reads.
    Everything else a rule knows about the file comes from ``aliases`` and ``constants``."""

    text: str = ""
    target: str = "trn1"
    root: ast.AST | None = None
    _parents: dict[int, ast.AST] | None = None
    _lines: list[str] | None = None

    def segment(self, node: ast.AST) -> str | None:
        return ast.get_source_segment(self.text, node)

    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            self._lines = self.text.split("\n")
        return self._lines

    @property
    def parents(self) -> dict[int, ast.AST]:
        if self._parents is None:  # built on demand: only fixes need it, and it costs a full walk
            self._parents = {}
            for parent in ast.walk(self.root) if self.root is not None else ():
                for child in ast.iter_child_nodes(parent):
                    self._parents[id(child)] = parent
        return self._parents

    def statement_of(self, node: ast.AST) -> ast.stmt | None:
        cur: ast.AST | None = node
        while cur is not None and not isinstance(cur, ast.stmt):
            cur = self.parents.get(id(cur))
        return cur if isinstance(cur, ast.stmt) else None


def _info(path: str, message: str, code: str = "sim_bad_input") -> Diagnostic:
    return Diagnostic(code, "info", message, path, 1, 1, 1, 2, SOURCE, doc_url(code))


def check_text(path: str, text: str | bytes, settings: Settings | None = None) -> list[Diagnostic]:
    """Static diagnostics of a kernel file's current text (saved or not); safe to call from several threads.

    The cyclic garbage collector is paused for the duration: parsing builds tens of thousands of AST
    objects, whose allocation otherwise triggers repeated full collections (a quarter of a cold check).
    Reference counting still frees everything; cycles wait for the next collection."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _check_text(path, text, settings)
    finally:
        if was_enabled:
            gc.enable()


def _check_text(path: str, text: str | bytes, settings: Settings | None = None) -> list[Diagnostic]:
    settings = settings or Settings()
    if isinstance(text, str) and text.isascii():  # the usual case: no encoding round trip
        size, binary, decoded = len(text), "\x00" in text, text
    else:
        raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
        size, binary = len(raw), b"\x00" in raw
        decoded = raw.decode("utf-8", "replace") if size <= MAX_BYTES and not binary else ""
    if size > MAX_BYTES:
        return [_info(path, f"file is {size} bytes; as-you-type NKI checks skip files over {MAX_BYTES} bytes")]
    if binary:
        return [_info(path, "binary file: no NKI checks")]
    found = layout(decoded)
    info = found.info
    if not info.generation:
        return []
    module_text = "\n".join(_MODULE_ASSIGN.findall("\n" + decoded))
    results = _results_for(_context_key(info, settings) + (module_text,))
    out: list[Diagnostic] = []
    failed: list[str] = []
    for unit in found.units:
        cached = results.get(unit.text)
        if cached is None:
            crashed: list[str] = []
            cached = _check_unit(unit, info, settings, module_text, crashed)
            if crashed:
                failed.extend(crashed)
            else:
                _remember(results, unit.text, cached)
        if cached:
            out.extend(_shift(d, unit.start_line - 1, path) for d in cached)
    lines = decoded.split("\n") if settings.sdk_generation else []
    for line, col, end_col, message in classic_on_new_sdk.check_lines(lines, settings.sdk_generation):
        out.append(Diagnostic(classic_on_new_sdk.CODE, "error", message, path, line, col, line, end_col, SOURCE,
                              doc_url(classic_on_new_sdk.CODE)))
    if failed:
        out.append(_info(path, f"internal error in NKI check(s) {', '.join(sorted(set(failed)))}; other checks ran",
                         "sim_python_exception"))
    return _dedupe(out)


# Per-function results, position-independent (lines relative to the function's first line): while the
# user types, only the function being edited is analysed again. Keyed by everything the analysis reads:
# the context (imports, constants, settings, module-level assignments) and then the function's text.
_RESULTS: dict[tuple[Any, ...], dict[str, list[Diagnostic]]] = {}  # in least-recently-used order
_RESULTS_LOCK = threading.Lock()  # checks run in a thread pool
_RESULTS_MAX = 2048  # functions per context; a kernel file has tens
_CONTEXTS_MAX = 16  # contexts kept at once: open files x settings, and a few recent import/constant edits
# column-0 `NAME = "text"` lines: the part of the file outside a function that a rule may read (a task's
# TARGET = "trn3"); matched after a "\n" (a literal prefix scans ~10x faster than "^")
_MODULE_ASSIGN = re.compile(r"\n([A-Za-z_]\w*[ \t]*=[ \t]*[rRbBuUfF]{0,2}[\"'][^\n]*)")


def clear_caches() -> None:
    """Forget every cached parse and result (the next check is a cold one)."""
    with _RESULTS_LOCK:
        _RESULTS.clear()
    source.clear_cache()


def _results_for(context: tuple[Any, ...]) -> dict[str, list[Diagnostic]]:
    """The results of one context, the least recently used context making room."""
    with _RESULTS_LOCK:
        results = _RESULTS.pop(context, None)
        if results is None:
            results = {}
            while len(_RESULTS) >= _CONTEXTS_MAX:
                del _RESULTS[next(iter(_RESULTS))]
        _RESULTS[context] = results
        return results


def _remember(results: dict[str, list[Diagnostic]], key: str, value: list[Diagnostic]) -> None:
    if len(results) >= _RESULTS_MAX:
        results.clear()
    results[key] = value


def _context_key(info: SourceInfo, settings: Settings) -> tuple[Any, ...]:
    shapes = tuple(sorted((k, tuple(sorted(v.items()))) for k, v in settings.input_shapes.items()))
    return (tuple(sorted(info.aliases.items())), tuple(sorted(info.constants.items())), info.generation,
            settings.target, settings.sdk_generation, shapes)


def _shift(d: Diagnostic, delta: int, path: str | None = None) -> Diagnostic:
    """The same diagnostic ``delta`` lines further down (edits of its fixes too)."""
    if delta == 0 and (path is None or path == d.path):
        return d
    fixes = tuple(Fix(f.title, tuple(TextEdit(e.line + delta, e.column, e.end_line + delta, e.end_column, e.new_text)
                                     for e in f.edits)) for f in d.fixes)
    return dataclasses.replace(d, path=path or d.path, line=d.line + delta, end_line=d.end_line + delta, fixes=fixes)


def _check_unit(unit: Unit, info: SourceInfo, settings: Settings, module_text: str,
                failed: list[str]) -> list[Diagnostic]:
    """Diagnostics of one function, lines relative to its first line.

    A column-0 function is parsed on its own; an indented one (a method, a nested function) inside an
    ``if 1:`` line, so that its columns, and the indentation of multi-line fixes, are the file's."""
    indented = unit.text[:1] in (" ", "\t", "\f")
    parsed = "if 1:\n" + unit.text if indented else unit.text
    node = unit.node
    if node is None:
        module = source.parse(parsed)
        body = module.body if module is not None else []
        if indented:
            body = body[0].body if body and isinstance(body[0], ast.If) else []
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
        if node is None:
            return []
    found = _run(node, parsed, info, settings, module_text, failed)
    return [_shift(d, -1) for d in found] if indented else found


def _run(node: ast.FunctionDef | ast.AsyncFunctionDef, text: str, info: SourceInfo, settings: Settings,
         module_text: str, failed: list[str]) -> list[Diagnostic]:
    decorators = [dotted_name(d) for d in node.decorator_list]
    is_kernel = any(d.split(".")[-1] in KERNEL_DECORATORS for d in decorators)
    # rules see the function's text (node positions refer to it), then the module-level assignments
    ctx = FunctionContext(aliases=info.aliases, constants=info.constants, generation=info.generation,
                          is_kernel=is_kernel, text=text + "\n" + module_text, target=settings.target, root=node,
                          param_shapes=dict(settings.input_shapes.get(node.name, {})))
    findings: list[Finding] = []

    def emit(event: Event) -> None:
        for rule in _BY_KIND.get(event.kind, ()):
            try:
                findings.extend(rule.check(event, ctx))
            except Exception:  # noqa: BLE001 -- a rule bug must not hide the other rules' findings
                failed.append(rule.__name__.rsplit(".", 1)[-1])

    try:
        Interpreter(ctx, emit).run(node)
    except RecursionError:
        return []
    return [_place(ctx.lines, f) for f in findings]


_BY_KIND: dict[str, list[Any]] = {}
for _rule in rules_pkg.ALL:
    for _kind in _rule.KINDS:
        _BY_KIND.setdefault(_kind, []).append(_rule)


def dotted_name(d: ast.expr) -> str:
    """``nki.jit`` for the decorator ``@nki.jit(...)`` (also used by the server's facts)."""
    target = d.func if isinstance(d, ast.Call) else d
    parts = []
    while isinstance(target, ast.Attribute):
        parts.append(target.attr)
        target = target.value
    if isinstance(target, ast.Name):
        parts.append(target.id)
    return ".".join(reversed(parts))


def module_info(module: ast.Module) -> SourceInfo:
    """Imports and integer constants of a parsed module (the ``ast`` twin of ``source.analyse``)."""
    info = SourceInfo()
    source.replay(source.module_ops(module.body), info)
    info.generation = source._generation(info.aliases)
    return info


def _column(lines: list[str], line: int, byte_col: int) -> int:
    """1-based character column of a UTF-8 byte offset in a line."""
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    if text.isascii():
        return min(byte_col, len(text)) + 1
    return len(text.encode("utf-8")[:byte_col].decode("utf-8", "ignore")) + 1


def _span(lines: list[str], node: ast.AST) -> tuple[int, int, int, int]:
    line = getattr(node, "lineno", None) or 1
    end_line = getattr(node, "end_lineno", None) or line
    col = _column(lines, line, getattr(node, "col_offset", 0))
    end_col = _column(lines, end_line, getattr(node, "end_col_offset", 0) or 0)
    return line, col, end_line, end_col


def _place(lines: list[str], f: Finding) -> Diagnostic:
    """The finding as a diagnostic of the analysed text (``lines``); its path is set when it is emitted."""
    line, col, end_line, end_col = _span(lines, f.node)
    fixes = []
    for nf in f.fixes:
        edits = []
        for node, new_text in nf.edits:
            l1, c1, l2, c2 = _span(lines, node)
            edits.append(TextEdit(l1, c1, l2, c2, new_text.lstrip(" ") if "\n" in new_text else new_text))
        fixes.append(Fix(nf.title, tuple(edits)))
    return Diagnostic(f.code, f.severity, f.message, "", line, col, end_line, max(end_col, col + 1) if
                      end_line == line else end_col, SOURCE, doc_url(f.code), (), tuple(fixes))


def _dedupe(diags: list[Diagnostic]) -> list[Diagnostic]:
    seen: set[tuple[str, int, int]] = set()
    out = []
    for d in diags:
        key = (d.code, d.line, d.column)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out
