"""Structure of a (possibly broken) kernel file, found with tree-sitter's error-tolerant parser.

What the checks need from the whole file: the NKI import aliases (and so the API generation),
module-level integer constants, and every function definition with its span and whether it parses.
A function with a syntax error inside is skipped by the semantic checks (no guess, no false positive);
the rest of the file is still checked while the user types.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import lru_cache

import tree_sitter
import tree_sitter_python


@lru_cache(maxsize=1)
def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_python.language()))


CLASSIC_ROOT = "neuronxcc.nki"
NEW_ROOT = "nki"


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


def _text(node: tree_sitter.Node) -> str:
    return node.text.decode("utf-8", "replace") if node.text is not None else ""


def _imports(node: tree_sitter.Node, info: SourceInfo) -> None:
    if node.type == "import_statement":
        for child in node.named_children:
            if child.type == "dotted_name":
                name = _text(child)
                info.aliases[name.split(".")[0]] = name.split(".")[0]
                info.aliases.setdefault(name, name)
            elif child.type == "aliased_import":
                target = child.child_by_field_name("name")
                alias = child.child_by_field_name("alias")
                if target is not None and alias is not None:
                    info.aliases[_text(alias)] = _text(target)
    elif node.type == "import_from_statement":
        module = node.child_by_field_name("module_name")
        if module is None:
            return
        mod = _text(module)
        for child in node.children_by_field_name("name"):
            if child.type == "dotted_name":
                info.aliases[_text(child)] = f"{mod}.{_text(child)}"
            elif child.type == "aliased_import":
                target = child.child_by_field_name("name")
                alias = child.child_by_field_name("alias")
                if target is not None and alias is not None:
                    info.aliases[_text(alias)] = f"{mod}.{_text(target)}"


def _generation(aliases: dict[str, str]) -> str:
    quals = set(aliases.values())
    classic = any(q == CLASSIC_ROOT or q.startswith(CLASSIC_ROOT + ".") for q in quals)
    new = any(q == NEW_ROOT or q.startswith(NEW_ROOT + ".") for q in quals)
    return "mixed" if classic and new else "classic" if classic else "new" if new else ""


def _constant(node: tree_sitter.Node, info: SourceInfo) -> None:
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
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return
    if isinstance(value, int) and not isinstance(value, bool):
        info.constants[_text(left)] = value


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


def analyse(source: bytes) -> SourceInfo:
    """Imports, constants and functions of a file (never raises on broken input)."""
    tree = _parser().parse(source)
    info = SourceInfo(has_error=tree.root_node.has_error)
    for node in tree.root_node.named_children:
        if node.type in ("import_statement", "import_from_statement"):
            _imports(node, info)
        elif node.type == "expression_statement":
            _constant(node, info)
    _functions(tree.root_node, info, True)
    info.generation = _generation(info.aliases)
    return info
