"""Small AST and text helpers shared by the deterministic source rewrites (``tile_split``, ``migrate``,
``migrate_masks``): qualified names through the imports, call-argument binding, exact source positions
(AST byte columns -> character offsets), fresh names, and turning a rewritten text into minimal edits."""

from __future__ import annotations

import ast
import difflib
from typing import Protocol
from collections.abc import Callable

from .fixes import apply_edits
from .model import TextEdit

Lin = dict[str, int]  # a linear form: atom -> coefficient, "" -> constant
# how ``linear`` reads a name: an int, an expression to substitute, "atom" (an opaque value), or None (refuse)
NameValue = Callable[[str], "int | ast.expr | str | None"]
PMAX_QUALS = ("neuronxcc.nki.language.tile_size.pmax", "nki.language.tile_size.pmax")


class Refuse(Exception):
    """The rewrite cannot be done exactly: offer nothing."""


class Span(ast.AST):
    """A source range for a fix edit (AST positions: 1-based lines, UTF-8 byte columns)."""

    def __init__(self, lineno: int, col_offset: int, end_lineno: int, end_col_offset: int) -> None:
        super().__init__()
        self.lineno, self.col_offset = lineno, col_offset
        self.end_lineno, self.end_col_offset = end_lineno, end_col_offset


def qual(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``nl.add`` -> ``neuronxcc.nki.language.add`` through the file's imports."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id]] + parts[::-1])


def api_name(node: ast.AST, aliases: dict[str, str], module: str) -> str | None:
    """The name under ``module`` ("language", "isa") of either generation: ``nl.exp`` -> ``exp``."""
    q = qual(node, aliases) or ""
    for prefix in (f"neuronxcc.nki.{module}.", f"nki.{module}."):
        if q.startswith(prefix):
            return q[len(prefix):]
    return None


def alias_of(aliases: dict[str, str], module: str) -> str | None:
    """The shortest local name bound to ``nki.<module>`` or ``neuronxcc.nki.<module>``."""
    names = sorted((a for a, q in aliases.items() if q in (f"neuronxcc.nki.{module}", f"nki.{module}")
                    and a.isidentifier()), key=len)
    return names[0] if names else None


def bind(call: ast.Call, params: tuple[str, ...], extra: bool = False) -> dict[str, ast.expr]:
    """Arguments by parameter name; starred arguments, too many positionals, duplicates or (unless
    ``extra``) unknown keywords refuse."""
    if len(call.args) > len(params) or any(isinstance(a, ast.Starred) for a in call.args):
        raise Refuse
    bound = dict(zip(params, call.args))
    for k in call.keywords:
        if k.arg is None or k.arg in bound or (k.arg not in params and not extra):
            raise Refuse
        bound[k.arg] = k.value
    return bound


def absent(e: ast.expr | None) -> bool:
    return e is None or (isinstance(e, ast.Constant) and e.value is None)


def names_in(e: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(e) if isinstance(n, ast.Name)}


def taken_names(root: ast.AST) -> set[str]:
    """Every identifier a new name must not collide with."""
    out = {n.id for n in ast.walk(root) if isinstance(n, ast.Name)}
    out |= {a.arg for a in ast.walk(root) if isinstance(a, ast.arg)}
    out |= {n.name for n in ast.walk(root) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    for n in ast.walk(root):
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in n.names}
    return out


class NameSet(Protocol):
    """What ``fresh`` needs of the taken names (a ``set`` is one)."""

    def __contains__(self, name: object) -> bool: ...

    def add(self, name: str) -> None: ...


def fresh(base: str, taken: NameSet) -> str:
    """``base``, ``base2``, ... : the first not in ``taken`` (which then holds it)."""
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}{k}"
    taken.add(name)
    return name


# -- positions ------------------------------------------------------------------------------------------
def line_bytes(lines: list[str], lineno: int) -> bytes:
    return lines[lineno - 1].encode("utf-8") if 0 < lineno <= len(lines) else b""


def offset(lines: list[str], lineno: int, byte_col: int) -> int:
    """Character offset in ``"\\n".join(lines)`` of an AST position."""
    before = sum(len(x) + 1 for x in lines[: lineno - 1])
    return before + len(line_bytes(lines, lineno)[:byte_col].decode("utf-8", "ignore"))


def char_range(lines: list[str], node: ast.AST) -> tuple[int, int]:
    line: int = getattr(node, "lineno", 1)
    return (offset(lines, line, getattr(node, "col_offset", 0)),
            offset(lines, getattr(node, "end_lineno", None) or line, getattr(node, "end_col_offset", None) or 0))


def node_span(text: str, node: ast.AST) -> tuple[int, int, int, int]:
    """The node's 1-based (line, column, end_line, end_column) in characters (``ast`` counts UTF-8 bytes)."""
    lines = text.split("\n")

    def col(line: int, byte_col: int) -> int:
        return len(lines[line - 1].encode("utf-8")[:byte_col].decode("utf-8", "ignore")) + 1

    line = getattr(node, "lineno", 1)
    end = getattr(node, "end_lineno", None) or line
    return line, col(line, getattr(node, "col_offset", 0)), end, col(end, getattr(node, "end_col_offset", 0) or 0)


def function_at(module: ast.AST, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The innermost function whose lines include ``line``."""
    fns = [n for n in ast.walk(module) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
           and n.lineno <= line <= (n.end_lineno or n.lineno)]
    return max(fns, key=lambda n: n.lineno) if fns else None


def segment(text: str, lines: list[str], node: ast.AST) -> str:
    """The node's source, on one line (a multi-line expression is parenthesised and joined)."""
    s, e = char_range(lines, node)
    seg = text[s:e]
    return seg if "\n" not in seg else f"({' '.join(seg.split())})"


def own_lines(lines: list[str], stmt: ast.stmt, tabs: bool = False) -> bool:
    """The statement fills its lines: nothing before it but spaces (or tabs, with ``tabs``: for a rewrite
    that indents in the file's own unit), nothing after it but a comment, no multi-line string inside (so
    its lines can be moved or re-indented as text)."""
    head = line_bytes(lines, stmt.lineno)[: stmt.col_offset]
    tail = line_bytes(lines, stmt.end_lineno or stmt.lineno)[stmt.end_col_offset or 0:].strip()
    if head.strip() or (b"\t" in head and not tabs) or (tail and not tail.startswith(b"#")):
        return False
    return not any(isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes)) and n.end_lineno != n.lineno
                   for n in ast.walk(stmt))


def replace_spans(text: str, edits: list[tuple[int, int, str]]) -> str:
    """Apply non-overlapping (start, end, new) character replacements."""
    last = len(text) + 1
    for start, end, new in sorted(edits, reverse=True):
        if end > last or start > end:
            raise Refuse
        text = text[:start] + new + text[end:]
        last = start
    return text


def diff_edits(old: str, new: str) -> tuple[TextEdit, ...]:
    """Line-level edits turning ``old`` into ``new`` (1-based positions against ``old``)."""
    a, b = old.split("\n"), new.split("\n")
    starts = [0]
    for line in a:
        starts.append(starts[-1] + len(line) + 1)
    spans: list[tuple[int, int, str]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        spans.append((starts[i1], starts[i2], "".join(x + "\n" for x in b[j1:j2])))
    if spans and spans[-1][1] > len(old):  # the change reaches the last line, which has no newline
        s, _, repl = spans[-1]
        spans[-1] = (s, len(old), repl.removesuffix("\n"))
    out = tuple(TextEdit(*_pos(a, s), *_pos(a, e), repl) for s, e, repl in spans)
    if apply_edits(old, out) != new:  # an edge case of the line split: fall back to one whole-file edit
        return (TextEdit(1, 1, *_pos(a, len(old)), new),)
    return out


def _pos(lines: list[str], char: int) -> tuple[int, int]:
    for n, line in enumerate(lines):
        if char <= len(line):
            return n + 1, char + 1
        char -= len(line) + 1
    return len(lines), len(lines[-1]) + 1


# -- linear forms ---------------------------------------------------------------------------------------
def linear(e: ast.expr, aliases: dict[str, str], name_value: NameValue, depth: int = 0) -> Lin | None:
    """``e`` as an integer linear form over opaque atoms (names, attribute chains, ``x.shape[k]``), or None.
    ``nl.tile_size.pmax`` is 128."""
    if depth > 16:
        return None
    if isinstance(e, ast.Constant) and type(e.value) is int:
        return {"": e.value}
    if isinstance(e, ast.Name):
        v = name_value(e.id)
        if isinstance(v, int):
            return {"": v}
        if isinstance(v, ast.expr):
            return linear(v, aliases, name_value, depth + 1)
        return {e.id: 1} if v == "atom" else None
    if isinstance(e, ast.Attribute) and qual(e, aliases) in PMAX_QUALS:
        return {"": 128}
    if isinstance(e, (ast.Attribute, ast.Subscript)) and _is_atom(e):
        root: ast.expr = e
        while isinstance(root, (ast.Attribute, ast.Subscript)):
            root = root.value
        return {ast.dump(e): 1} if isinstance(root, ast.Name) and name_value(root.id) is not None else None
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
        inner = linear(e.operand, aliases, name_value, depth + 1)
        return None if inner is None else {k: (-c if isinstance(e.op, ast.USub) else c) for k, c in inner.items()}
    if isinstance(e, ast.BinOp):
        a, b = linear(e.left, aliases, name_value, depth + 1), linear(e.right, aliases, name_value, depth + 1)
        if a is None or b is None:
            return None
        if isinstance(e.op, ast.Add):
            return lin_sub(a, {k: -c for k, c in b.items()})
        if isinstance(e.op, ast.Sub):
            return lin_sub(a, b)
        if isinstance(e.op, ast.Mult):
            ka, kb = lin_const(a), lin_const(b)
            if ka is not None:
                return {k: ka * c for k, c in b.items()}
            if kb is not None:
                return {k: kb * c for k, c in a.items()}
    return None


def lin_sub(a: Lin, b: Lin) -> Lin:
    out = dict(a)
    for k, c in b.items():
        out[k] = out.get(k, 0) - c
    return {k: c for k, c in out.items() if c or k == ""}


def lin_const(v: Lin | None) -> int | None:
    """The value of a constant form, else None."""
    if v is None:
        return None
    return v.get("", 0) if all(c == 0 for k, c in v.items() if k) else None


def _is_atom(e: ast.expr) -> bool:
    if isinstance(e, ast.Name):
        return True
    if isinstance(e, ast.Attribute):
        return _is_atom(e.value)
    if isinstance(e, ast.Subscript):
        return _is_atom(e.value) and isinstance(e.slice, ast.Constant) and type(e.slice.value) is int
    return False
