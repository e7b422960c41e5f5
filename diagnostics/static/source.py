"""Structure of a (possibly broken) kernel file: its NKI imports, integer constants and functions.

The file is cut into **chunks** at column-0 ``def`` / ``class`` / decorator lines (``layout``), and each
chunk is parsed on its own with ``ast``, cached by its text: while the user types, only the chunk being
edited is parsed again. When every chunk parses, the file parses, with exactly the statements of a
whole-file parse: a chunk that parses alone ends with the tokenizer at column 0, outside any bracket or
string, so the next chunk starts where a statement starts.

A chunk that does not parse: if it ends inside a string, the following cuts are string text and it
extends to where the string closes; if it parses together with the next chunk (a multi-line decorator
cut from its def), the two are one chunk. Otherwise the rest of the file, from the first such chunk on,
is parsed once to decide whether the file is valid (a cut inside brackets): if so, it becomes one
chunk; if not, the file is broken, and each chunk that does not parse is searched with tree-sitter's
error-tolerant parser for its intact functions, imports and constants — a chunk that parses is checked
exactly as in a valid file. A function with a syntax error inside is skipped by the semantic checks
(no guess, no false positive).
"""

from __future__ import annotations

import ast
import re
import threading
from dataclasses import dataclass, field

import tree_sitter
import tree_sitter_python

from ...toolchain.source_facts import generation_of_aliases

CLASSIC_ROOT = "neuronxcc.nki"
NEW_ROOT = "nki"
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
# An import or constant, in file order: ("set", name, qualified) / ("default", name, qualified) / ("const", name, int)
Op = tuple[str, str, str | int]

# a column-0 def / class / decorator line; "\n" first: a literal prefix makes the scan ~10x faster than "^"
_CUT = re.compile(r"\n(?=@|def\b|async[ \t]+def\b|class\b)")
_CHUNKS_MAX = 4096  # cached chunk parses; a kernel file has tens of chunks, a workspace a few hundred files
_CHUNK_CACHE_CHARS = 64 * 1024  # larger chunks (a whole file that could not be cut) are not kept
_local = threading.local()  # one tree-sitter parser per thread: the static tier runs checks in a pool


def _parser() -> tree_sitter.Parser:
    parser = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_python.language()))
    return parser


@dataclass
class FunctionSpan:
    """A ``def`` (top-level or nested) with its 1-based line range and decorator names."""

    name: str
    start_line: int  # first line of the def (or of its first decorator)
    def_line: int
    end_line: int
    decorators: list[str]
    intact: bool  # no syntax error inside
    top_level: bool


@dataclass
class SourceInfo:
    """What a file imports from NKI and where its functions are."""

    aliases: dict[str, str] = field(default_factory=dict)  # local name -> qualified module/object
    generation: str = ""  # "classic" | "new" | "mixed" | ""
    constants: dict[str, int] = field(default_factory=dict)
    functions: list[FunctionSpan] = field(default_factory=list)
    has_error: bool = False


def replay(ops: list[Op] | tuple[Op, ...], info: SourceInfo) -> None:
    """Apply imports / constants to ``info`` in file order (later bindings win, as in Python)."""
    for kind, name, value in ops:
        if kind == "const":
            info.constants[name] = value  # type: ignore[assignment]
        elif kind == "set":
            info.aliases[name] = value  # type: ignore[assignment]
        else:
            info.aliases.setdefault(name, value)  # type: ignore[arg-type]


def generation_of(aliases: dict[str, str]) -> str:
    return generation_of_aliases(aliases)  # the one rule (toolchain/source_facts.py)


# -- ast: the module-level facts and functions of a chunk that parses ----------------------------------
def module_ops(body: list[ast.stmt]) -> list[Op]:
    """Imports and ``NAME = <int>`` constants of module-level statements."""
    ops: list[Op] = []
    for node in body:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    ops.append(("set", a.asname, a.name))
                else:
                    root = a.name.split(".")[0]
                    ops.append(("set", root, root))
                    ops.append(("default", a.name, a.name))
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                ops.append(("set", a.asname or a.name, f"{node.module}.{a.name}"))
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int:
            ops.append(("const", node.targets[0].id, node.value.value))
    return ops


def functions_of(module: ast.Module) -> list[FunctionNode]:
    """Every function (nested ones too), in line order."""
    out: list[FunctionNode] = []
    stack: list[ast.AST] = [module]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node) if not isinstance(node, ast.expr) else ():
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append(child)
                stack.append(child)
            elif isinstance(child, (ast.ClassDef, ast.If, ast.Try, ast.With)):
                stack.append(child)
    out.sort(key=lambda fn: fn.lineno)
    return out


def first_line(fn: FunctionNode) -> int:
    """The line of the def, or of its first decorator."""
    return min([fn.lineno] + [d.lineno for d in fn.decorator_list])


# -- tree-sitter: the same facts from broken text ------------------------------------------------------
def _text(node: tree_sitter.Node) -> str:
    return node.text.decode("utf-8", "replace") if node.text is not None else ""


def _imports(node: tree_sitter.Node, ops: list[Op]) -> None:
    if node.type == "import_statement":
        for child in node.named_children:
            if child.type == "dotted_name":
                name = _text(child)
                ops.append(("set", name.split(".")[0], name.split(".")[0]))
                ops.append(("default", name, name))
            elif child.type == "aliased_import":
                target = child.child_by_field_name("name")
                alias = child.child_by_field_name("alias")
                if target is not None and alias is not None:
                    ops.append(("set", _text(alias), _text(target)))
    elif node.type == "import_from_statement":
        module = node.child_by_field_name("module_name")
        if module is None:
            return
        mod = _text(module)
        for child in node.children_by_field_name("name"):
            if child.type == "dotted_name":
                ops.append(("set", _text(child), f"{mod}.{_text(child)}"))
            elif child.type == "aliased_import":
                target = child.child_by_field_name("name")
                alias = child.child_by_field_name("alias")
                if target is not None and alias is not None:
                    ops.append(("set", _text(alias), f"{mod}.{_text(target)}"))


def _constant(node: tree_sitter.Node, ops: list[Op]) -> None:
    # NAME = <int literal> at module level (tile sizes and the like)
    if node.type != "expression_statement" or node.named_child_count != 1:
        return
    assign = node.named_children[0]
    if assign.type != "assignment":
        return
    left, right = assign.child_by_field_name("left"), assign.child_by_field_name("right")
    if left is None or right is None or left.type != "identifier":
        return
    try:
        value = ast.literal_eval(_text(right))
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return
    if isinstance(value, int) and not isinstance(value, bool):
        ops.append(("const", _text(left), value))


def _functions(node: tree_sitter.Node, info: SourceInfo, top_level: bool, depth: int = 0) -> None:
    if depth > 50:  # deeply nested code: stop descending; nothing below is checked
        return
    for child in node.named_children:
        decorators: list[str] = []
        target = child
        if child.type == "decorated_definition":
            decorators = [_text(d).lstrip("@").split("(")[0].strip() for d in child.named_children
                          if d.type == "decorator"]
            target = child.child_by_field_name("definition") or child
        if target.type == "function_definition":
            name_node = target.child_by_field_name("name")
            info.functions.append(FunctionSpan(
                name=_text(name_node) if name_node is not None else "?",
                start_line=child.start_point[0] + 1, def_line=target.start_point[0] + 1,
                end_line=child.end_point[0] + 1, decorators=decorators, intact=not child.has_error,
                top_level=top_level))
            body = target.child_by_field_name("body")
            if body is not None:
                _functions(body, info, False, depth + 1)
        elif child.type in ("class_definition", "if_statement", "block", "try_statement", "with_statement",
                            "else_clause", "elif_clause"):
            _functions(child, info, top_level and child.type != "class_definition", depth + 1)


def _analyse(source: bytes) -> tuple[SourceInfo, list[Op]]:
    tree = _parser().parse(source)
    info = SourceInfo(has_error=tree.root_node.has_error)
    ops: list[Op] = []
    for node in tree.root_node.named_children:
        if node.type in ("import_statement", "import_from_statement"):
            _imports(node, ops)
        elif node.type == "expression_statement":
            _constant(node, ops)
    _functions(tree.root_node, info, True)
    replay(ops, info)
    info.generation = generation_of(info.aliases)
    return info, ops


def analyse(source: bytes) -> SourceInfo:
    """Imports, constants and functions of a file, with tree-sitter (never raises on broken input)."""
    return _analyse(source)[0]


# -- chunks --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Chunk:
    """What one chunk contributes, position-independent (lines are 1-based within the chunk)."""

    ok: bool  # parses on its own
    ops: tuple[Op, ...] = ()  # imports / constants, in order
    # (first line, start offset, end offset) of each function to check, in line order: its text is
    # chunk[start:end], from its first line (a decorator's) to the end of its last line
    functions: tuple[tuple[int, int, int], ...] = ()
    open_quote: str = ""  # a chunk that does not parse may end inside a string: its quote (the next cut is text)


@dataclass
class Unit:
    """One function to check: its lines, where they start, and its parse when this check already has it."""

    text: str  # the function's lines (decorators included), joined with "\n"
    start_line: int  # 1-based line of ``text``'s first line in the file
    node: FunctionNode | None = None  # parse of ``text`` (a column-0 function only)


@dataclass
class Layout:
    """The file as the checker sees it: module facts and the functions to check."""

    info: SourceInfo
    units: list[Unit]
    valid: bool  # the whole file parses (``ast.parse`` would succeed)


_chunks: dict[str, Chunk] = {}  # chunk text -> its ``ast`` facts (or that it does not parse)
_tolerant: dict[str, Chunk] = {}  # text of a chunk that does not parse -> its tree-sitter facts


def clear_cache() -> None:
    _chunks.clear()
    _tolerant.clear()


def parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None


def _spans(text: str, lines: list[tuple[int, int]]) -> tuple[tuple[int, int, int], ...]:
    """(first line, start offset, end offset) in ``text`` of each (first line, last line) range."""
    starts = [0]
    pos = text.find("\n")
    while pos >= 0:
        starts.append(pos + 1)
        pos = text.find("\n", pos + 1)
    out = []
    for first, last in lines:
        end = starts[last] - 1 if last < len(starts) else len(text)
        out.append((first, starts[first - 1], end))
    return tuple(out)


def _from_module(module: ast.Module, text: str) -> tuple[Chunk, dict[int, FunctionNode]]:
    """Chunk facts of a parsed chunk, and its column-0 functions by first line (chunk-relative nodes)."""
    fns = functions_of(module)
    spans = _spans(text, [(first_line(fn), fn.end_lineno or fn.lineno) for fn in fns])
    nodes = {first_line(fn): fn for fn in fns if fn.col_offset == 0}
    return Chunk(True, tuple(module_ops(module.body)), spans), nodes


def _remember(cache: dict[str, Chunk], text: str, chunk: Chunk) -> None:
    if len(text) <= _CHUNK_CACHE_CHARS:
        if len(cache) >= _CHUNKS_MAX:
            cache.clear()
        cache[text] = chunk


def parse_chunk(text: str) -> tuple[Chunk, dict[int, FunctionNode]]:
    """``ast`` facts of one chunk (cached by its text); the fresh parse's nodes when it was parsed now."""
    cached = _chunks.get(text)
    if cached is not None:
        return cached, {}
    module = parse(text)
    nodes: dict[int, FunctionNode] = {}
    if module is not None:
        chunk, nodes = _from_module(module, text)
    else:
        chunk = Chunk(False, open_quote=open_quote(text))
    _remember(_chunks, text, chunk)
    return chunk, nodes


def _broken_chunk(text: str) -> Chunk:
    """Tree-sitter facts of a chunk that does not parse: its imports, constants and intact functions."""
    cached = _tolerant.get(text)
    if cached is None:
        info, ops = _analyse(text.encode("utf-8", "surrogatepass"))
        spans = _spans(text, [(fn.start_line, fn.end_line) for fn in info.functions if fn.intact])
        cached = Chunk(False, tuple(ops), spans)
        _remember(_tolerant, text, cached)
    return cached


def cut_offsets(source: str) -> list[int]:
    """Offsets where chunks start: 0, and each column-0 ``def``/``class``/decorator line whose previous line
    is not a decorator."""
    out = [0]
    for m in _CUT.finditer(source):
        if source.startswith("@", source.rfind("\n", 0, m.start()) + 1):
            continue
        out.append(m.start() + 1)
    return out


def layout(source: str) -> Layout:
    """Module facts and functions of ``source`` (valid or broken); see the module docstring."""
    offsets = cut_offsets(source)
    pieces = [source[a:b] for a, b in zip(offsets, offsets[1:] + [len(source)])]
    chunks: list[tuple[int, str, Chunk, dict[int, FunctionNode]]] = []  # (first line, text, facts, nodes)
    line, k = 1, 0
    while k < len(pieces):
        text = pieces[k]
        k += 1
        chunk, nodes = parse_chunk(text)
        if not chunk.ok and chunk.open_quote and k < len(pieces):
            quote, joined = chunk.open_quote, [text]
            while quote and k < len(pieces):  # the next cuts are inside the string: not code
                quote = open_quote(pieces[k], quote)
                joined.append(pieces[k])
                k += 1
            text = "".join(joined)
            chunk, nodes = parse_chunk(text)
        if not chunk.ok and k < len(pieces):
            merged, merged_nodes = parse_chunk(text + pieces[k])  # e.g. a multi-line decorator cut from its def
            if merged.ok:
                text += pieces[k]
                k += 1
                chunk, nodes = merged, merged_nodes
        chunks.append((line, text, chunk, nodes))
        line += text.count("\n")
    valid = True
    bad = next((n for n, c in enumerate(chunks) if not c[2].ok), None)
    if bad is not None:
        start = chunks[bad][0]
        tail = "".join(c[1] for c in chunks[bad:])
        module = parse(tail)
        if module is not None:  # a cut fell inside a statement (a string, brackets): one chunk from there on
            chunk, nodes = _from_module(module, tail)
            chunks[bad:] = [(start, tail, chunk, nodes)]
        else:
            valid = False
    info = SourceInfo()
    units: list[Unit] = []
    for start, text, chunk, nodes in chunks:
        if not chunk.ok:
            chunk = _broken_chunk(text)
        replay(chunk.ops, info)
        units.extend(units_of(text, chunk, nodes, start))
    info.generation = generation_of(info.aliases)
    return Layout(info, units, valid)


def units_of(text: str, chunk: Chunk, nodes: dict[int, FunctionNode], start: int = 1) -> list[Unit]:
    """The functions of one chunk (``text``, whose first line is the file's line ``start``) as units."""
    units = []
    for first, a, b in chunk.functions:
        node = nodes.get(first)
        if node is not None and first != 1:
            ast.increment_lineno(node, 1 - first)  # positions relative to the function's first line
        units.append(Unit(text[a:b], start + first - 1, node))
    return units


def remember_chunk(text: str, chunk: Chunk) -> None:
    """Cache the facts of a chunk parsed elsewhere (by the helper process of ``parallel.py``)."""
    if text not in _chunks:
        _remember(_chunks, text, chunk)


def cached_chunk(text: str) -> Chunk | None:
    return _chunks.get(text)


# -- strings: where a chunk that does not parse ends ---------------------------------------------------
_LEXEME = re.compile(r"#[^\n]*|'''|\"\"\"|'|\"")
_STRING_END = {"'''": re.compile(r"(?:[^'\\]|\\.|'(?!''))*'''", re.DOTALL),
               '"""': re.compile(r'(?:[^"\\]|\\.|"(?!""))*"""', re.DOTALL),
               "'": re.compile(r"(?:[^'\\\n]|\\.)*(?:'|\n)", re.DOTALL),  # a one-quote string ends at the line
               '"': re.compile(r'(?:[^"\\\n]|\\.)*(?:"|\n)', re.DOTALL)}


def open_quote(text: str, quote: str = "") -> str:
    """The quote of the string literal Python's tokenizer is inside at the end of ``text`` ("" if none),
    starting inside ``quote``'s string (or in code).

    Comments and strings are skipped the way the tokenizer does (a backslash escapes the next character,
    also a newline; a one-quote string ends at an unescaped newline)."""
    pos = 0
    while True:
        if quote:
            end = _STRING_END[quote].match(text, pos)
            if end is None:
                return quote
            pos, quote = end.end(), ""
        m = _LEXEME.search(text, pos)
        if m is None:
            return ""
        if m.group()[0] == "#":
            pos = m.end()
        else:
            pos, quote = m.end(), m.group()


def ends_in_string(text: str) -> bool:
    """Whether a string literal is still open at the end of ``text`` (read from the top)."""
    return bool(open_quote(text))
