"""As-you-type static checks of NKI kernels: ``check_text(path, text)`` -> diagnostics, no execution.

Pipeline: tree-sitter finds imports, constants and functions in possibly broken text
(``source.py``); every intact function that uses NKI is parsed with ``ast`` and abstractly interpreted
(``interp.py``); rules (``rules/``, one file each) turn the events into findings; this module places
them in the file and converts them to the shared ``Diagnostic`` model. A rule that crashes costs one
informational diagnostic, never the others.
"""

from __future__ import annotations

import ast
import dataclasses
import textwrap
from dataclasses import dataclass, field
from typing import Any

from ...toolchain.errors import doc_url
from ..model import Diagnostic, Fix, TextEdit
from . import rules as rules_pkg
from .rules import classic_on_new_sdk
from .finding import Finding
from .interp import Context, Event, Interpreter
from .source import FunctionSpan, SourceInfo, _generation, analyse

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
    """Context of one function: adds source access for fixes."""

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
    """Static diagnostics of a kernel file's current text (saved or not)."""
    settings = settings or Settings()
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if len(raw) > MAX_BYTES:
        return [_info(path, f"file is {len(raw)} bytes; as-you-type NKI checks skip files over {MAX_BYTES} bytes")]
    if b"\x00" in raw:
        return [_info(path, "binary file: no NKI checks")]
    source = raw.decode("utf-8", "replace")
    lines = source.split("\n")
    out: list[Diagnostic] = []
    failed: list[str] = []
    module = _parse_whole(source)
    if module is not None:  # fast path: the file parses, one ast serves every function
        info = module_info(module)
        if not info.generation:
            return []
        functions = _functions_of(module)
        inside: set[int] = set()
        for fn_node, _ in functions:
            first = min([fn_node.lineno] + [d.lineno for d in fn_node.decorator_list])
            inside.update(range(first, (fn_node.end_lineno or first) + 1))
        # rules may read module-level text (e.g. a task's TARGET): it is part of every function's key
        module_text = "\n".join(line for n, line in enumerate(lines, 1) if n not in inside)
        context_key = _context_key(info, settings) + (module_text,)
        for fn_node, decorators in functions:
            first = min([fn_node.lineno] + [d.lineno for d in fn_node.decorator_list])
            body = "\n".join(lines[first - 1: fn_node.end_lineno])
            key = (body, context_key)
            cached = _CACHE.get(key)
            if cached is None:
                found = _run(path, lines, fn_node, decorators, source, 1, 0, info, settings, failed)
                cached = [_shift(d, 1 - first) for d in found]
                if not failed:
                    _remember(key, cached)
            out.extend(_shift(d, first - 1, path) for d in cached)
    else:  # the user is typing: tree-sitter finds the intact functions
        info = analyse(raw)
        if not info.generation:
            return []
        inside = set()
        for fn in info.functions:
            if fn.top_level:
                inside.update(range(fn.start_line, fn.end_line + 1))
        module_text = "\n".join(line for n, line in enumerate(lines, 1) if n not in inside)
        context_key = _context_key(info, settings) + (module_text, "partial")
        for fn in info.functions:
            if not fn.intact:
                continue
            key = ("\n".join(lines[fn.start_line - 1: fn.end_line]), context_key)
            cached = _CACHE.get(key)
            if cached is None:
                found = _check_function(path, lines, fn, info, settings, failed)
                cached = [_shift(d, 1 - fn.start_line) for d in found]
                if not failed:
                    _remember(key, cached)
            out.extend(_shift(d, fn.start_line - 1, path) for d in cached)
    for line, col, end_col, message in classic_on_new_sdk.check_lines(lines, settings.sdk_generation):
        out.append(Diagnostic(classic_on_new_sdk.CODE, "error", message, path, line, col, line, end_col, SOURCE,
                              doc_url(classic_on_new_sdk.CODE)))
    if failed:
        out.append(_info(path, f"internal error in NKI check(s) {', '.join(sorted(set(failed)))}; other checks ran",
                         "sim_python_exception"))
    return _dedupe(out)


# Per-function results, position-independent (lines relative to the function's first line): while the
# user types, only the function being edited is analysed again. Keyed by the exact function text and
# everything else the analysis reads (imports, constants, settings).
_CACHE: dict[tuple[str, tuple[Any, ...]], list[Diagnostic]] = {}
_CACHE_MAX = 4096  # functions; a kernel file has tens, a workspace a few hundred


def _remember(key: tuple[str, tuple[Any, ...]], value: list[Diagnostic]) -> None:
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = value


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


def _check_function(path: str, lines: list[str], fn: FunctionSpan, info: SourceInfo, settings: Settings,
                    failed: list[str]) -> list[Diagnostic]:
    chunk = "\n".join(lines[fn.start_line - 1: fn.end_line])
    if not any(alias in chunk for alias in info.aliases):
        return []
    dedented = textwrap.dedent(chunk)
    indent = _indent_of(chunk, dedented)
    try:
        tree = ast.parse(dedented)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if node is None:
        return []
    return _run(path, lines, node, fn.decorators, dedented, fn.start_line, indent, info, settings, failed)


def _run(path: str, lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef, decorators: list[str], text: str,
         start_line: int, indent: int, info: SourceInfo, settings: Settings, failed: list[str]) -> list[Diagnostic]:
    is_kernel = any(d.split(".")[-1] in KERNEL_DECORATORS for d in decorators)
    ctx = FunctionContext(aliases=info.aliases, constants=info.constants, generation=info.generation,
                          is_kernel=is_kernel, text=text, target=settings.target, root=node,
                          param_shapes=dict(settings.input_shapes.get(node.name, {})))
    if start_line == 1 and indent == 0:
        ctx._lines = lines  # the whole file: share its lines instead of splitting it once per function
    findings: list[Finding] = []

    def emit(event: Event) -> None:
        for rule in _BY_KIND.get(event.kind, ()):
            try:
                findings.extend(rule.check(event, ctx))
            except Exception:  # a rule bug must not hide the other rules' findings
                failed.append(rule.__name__.rsplit(".", 1)[-1])

    try:
        Interpreter(ctx, emit).run(node)
    except RecursionError:
        return []
    return [_place(path, lines, start_line, indent, f, ctx) for f in findings]


_BY_KIND: dict[str, list[Any]] = {}
for _rule in rules_pkg.ALL:
    for _kind in _rule.KINDS:
        _BY_KIND.setdefault(_kind, []).append(_rule)


def _parse_whole(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _functions_of(module: ast.Module) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, list[str]]]:
    """Every function (nested ones too) with its decorator names."""
    out = []
    stack: list[ast.AST] = [module]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node) if not isinstance(node, ast.expr) else ():
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((child, [dotted_name(d) for d in child.decorator_list]))
                stack.append(child)
            elif isinstance(child, (ast.ClassDef, ast.If, ast.Try, ast.With)):
                stack.append(child)
    out.sort(key=lambda x: x[0].lineno)
    return out


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
    """Imports and integer constants of a parsed module (the fast-path twin of ``source.analyse``)."""
    info = SourceInfo()
    for node in module.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    info.aliases[a.asname] = a.name
                else:
                    info.aliases[a.name.split(".")[0]] = a.name.split(".")[0]
                    info.aliases.setdefault(a.name, a.name)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                info.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int:
            info.constants[node.targets[0].id] = node.value.value
    info.generation = _generation(info.aliases)
    return info


def _indent_of(chunk: str, dedented: str) -> int:
    first = next((line for line in chunk.split("\n") if line.strip()), "")
    return len(first) - len(first.lstrip())


def _column(lines: list[str], line: int, byte_col: int, indent: int) -> int:
    """1-based character column of a byte offset in the dedented text."""
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    raw = text.encode("utf-8")
    return len(raw[: byte_col + indent].decode("utf-8", "ignore")) + 1


def _span(lines: list[str], start_line: int, indent: int, node: ast.AST) -> tuple[int, int, int, int]:
    first = getattr(node, "lineno", None) or 1
    line = first + start_line - 1
    end_line = (getattr(node, "end_lineno", None) or first) + start_line - 1
    col = _column(lines, line, getattr(node, "col_offset", 0), indent)
    end_col = _column(lines, end_line, getattr(node, "end_col_offset", 0) or 0, indent)
    return line, col, end_line, end_col


def _place(path: str, lines: list[str], start_line: int, indent: int, f: Finding, ctx: FunctionContext) -> Diagnostic:
    line, col, end_line, end_col = _span(lines, start_line, indent, f.node)
    fixes = []
    for nf in f.fixes:
        edits = []
        for node, new_text in nf.edits:
            l1, c1, l2, c2 = _span(lines, start_line, indent, node)
            edits.append(TextEdit(l1, c1, l2, c2, textwrap.indent(new_text, " " * indent).lstrip(" ")
                                  if "\n" in new_text else new_text))
        fixes.append(Fix(nf.title, tuple(edits)))
    return Diagnostic(f.code, f.severity, f.message, path, line, col, end_line, max(end_col, col + 1) if
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
