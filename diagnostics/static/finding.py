"""What a rule returns: an error id, a message, the AST node it is about, and optional fixes as
node-relative edits. The engine turns nodes into file positions."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field


@dataclass
class NodeFix:
    """Replace the source span of each node with the given text (all edits apply together)."""

    title: str
    edits: list[tuple[ast.AST, str]]


@dataclass
class Finding:
    code: str
    message: str
    node: ast.AST
    severity: str = "error"
    fixes: list[NodeFix] = field(default_factory=list)
