"""Static analysis of one function: parse it if needed, interpret it abstractly, run the rules on the
events, and place their findings as diagnostics whose lines are relative to the function's first line.

Everything here depends only on the function's text, the settings, the file's API generation, its
column-0 ``NAME = "string"`` lines, and the module-level bindings (imports, integer constants) it looks
up — which the analysis sees through ``reads.Recording`` dicts, so the caller learns exactly which
bindings a result depends on (``reads.Reads``). That is what lets ``check_text`` cache results per
function, reuse them after module-level edits that touch none of those bindings, and lets a helper
process analyse part of a file (``parallel.py``).
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ...toolchain import source_facts
from nki_agent.toolchain.facts.errors import doc_url
from nki_agent.toolchain.facts.targets import resolve_target
from ..model import Diagnostic, Fix, TextEdit
from . import rules as rules_pkg
from . import source
from .finding import Finding
from .interp import Context, Event, Interpreter
from .reads import Reads, Recording
from .source import SourceInfo, Unit

SOURCE = "nki-check"
KERNEL_DECORATORS = source_facts.KERNEL_DECORATORS  # the one list (toolchain/source_facts.py)


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

    ``text`` is the function's own source (``source``: ``root``'s positions refer to it; a nested
    function's comes after an ``if 1:`` line, so its columns are the file's), followed by the file's
    column-0 ``NAME = "string"`` lines (``module_text``, e.g. a task's ``TARGET = "trn3"``): the only
    module text a rule reads. Reading ``text`` is noted (the result then depends on those lines);
    ``segment`` and ``lines`` read only the function. Everything else a rule knows about the file comes
    from ``aliases`` and ``constants``."""

    source: str = ""
    module_text: str = ""
    target: str = "trn1"
    root: ast.AST | None = None
    _parents: dict[int, ast.AST] | None = None
    _lines: list[str] | None = None
    _text: str | None = None
    _module_read: list[bool] = field(default_factory=list)  # shared with copies (``dataclasses.replace``)

    @property
    def text(self) -> str:
        if not self._module_read:
            self._module_read.append(True)
        if self._text is None:
            self._text = self.source + "\n" + self.module_text
        return self._text

    @property
    def module_read(self) -> bool:
        """Whether anything read ``text`` (the module's string lines with it)."""
        return bool(self._module_read)

    def segment(self, node: ast.AST) -> str | None:
        return ast.get_source_segment(self.source, node)

    @property
    def lines(self) -> list[str]:
        """The function's own lines (``source``)."""
        if self._lines is None:
            self._lines = self.source.split("\n")
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



def shift(d: Diagnostic, delta: int, path: str | None = None) -> Diagnostic:
    """The same diagnostic ``delta`` lines further down (edits of its fixes too)."""
    if delta == 0 and (path is None or path == d.path):
        return d
    fixes = tuple(Fix(f.title, tuple(TextEdit(e.line + delta, e.column, e.end_line + delta, e.end_column, e.new_text)
                                     for e in f.edits)) for f in d.fixes)
    return dataclasses.replace(d, path=path or d.path, line=d.line + delta, end_line=d.end_line + delta, fixes=fixes)


def check_unit(unit: Unit, info: SourceInfo, settings: Settings, module_text: str,
               failed: list[str], reads: list[Reads] | None = None) -> list[Diagnostic]:
    """Diagnostics of one function, lines relative to its first line; ``reads`` (if given) receives what
    the analysis read of ``info``'s imports and constants.

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
            if reads is not None:
                reads.append(Reads((), ()))  # nothing to analyse: nothing read
            return []
    found = run(node, parsed, info, settings, module_text, failed, reads)
    return [shift(d, -1) for d in found] if indented else found


def run(node: ast.FunctionDef | ast.AsyncFunctionDef, text: str, info: SourceInfo, settings: Settings,
        module_text: str, failed: list[str], reads: list[Reads] | None = None) -> list[Diagnostic]:
    decorators = [dotted_name(d) for d in node.decorator_list]
    is_kernel = any(d.split(".")[-1] in KERNEL_DECORATORS for d in decorators)
    # the file's bindings, through dicts that note what this analysis reads of them (for the caller's cache)
    aliases: Recording[str] = Recording(info.aliases)
    constants: Recording[int] = Recording(info.constants)
    # rules see the function's text (node positions refer to it), then the module-level assignments
    ctx = FunctionContext(aliases=aliases, constants=constants, generation=info.generation,
                          is_kernel=is_kernel, source=text, module_text=module_text,
                          target=resolve_target(settings.target, generation=info.generation),
                          root=node, param_shapes=dict(settings.input_shapes.get(node.name, {})))
    try:
        return _run(node, text, ctx, failed)
    finally:
        if reads is not None:
            reads.append(Reads.of(aliases, constants, module_text if ctx.module_read else None))


def _run(node: ast.FunctionDef | ast.AsyncFunctionDef, text: str, ctx: FunctionContext,
         failed: list[str]) -> list[Diagnostic]:
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
    return [_place(ctx.lines, f) for f in findings] if findings else []


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
    info.generation = source.generation_of(info.aliases)
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


