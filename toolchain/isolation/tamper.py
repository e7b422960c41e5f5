"""The kernel role's static tripwire: kernel source that tampers with the Python process it runs in.

A kernel computes with ``nl.*`` / ``nisa.*``; it never needs to rebind a module's attributes
(``np.subtract = np.add``), walk ``sys.modules``, read a function's globals or code, or import the
toolchain itself. Such code can make a wrong NKI program produce right numbers *inside* the kernel
worker (patched NumPy, patched simulator tables), which the parent's comparison cannot see, so the
kernel role refuses to load a file that spells any of it (``findings``), as ``sim_sandbox_violation``
at the offending line. The rules are deliberately narrow — valid public kernels never trip them
(``benchmarks/corpus/static_corpus.py`` runs them over the public corpus) — and the fix agent's
``agent/integrity.py`` is the broad check for model-written candidates. Like the audit hook this is
a tripwire with a clear message, not the boundary: see docs/toolchain.md.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

# Modules whose import means reaching the interpreter or this tool rather than computing.
TAMPER_MODULES = frozenset({"nki_agent", "gc", "ctypes", "_ctypes", "_xxsubinterpreters", "_interpreters",
                            "interpreters", "_testcapi", "_testinternalcapi"})
# Attributes that reach other code's state: globals, code, closures, frames, the class graph.
TAMPER_ATTRS = frozenset({"__globals__", "__code__", "__closure__", "__subclasses__", "__builtins__", "__mro__",
                          "__bases__", "__base__", "f_globals", "f_locals", "f_back", "f_builtins", "tb_frame", "gi_frame", "cr_frame",
                          "ag_frame", "co_code", "_getframe", "settrace", "setprofile", "meta_path", "path_hooks",
                          "addaudithook"})
PATCHERS = frozenset({"setattr", "delattr", "vars"})
# Attributes that are fine on a kernel's own objects (a dataclass's ``__dict__``, ``object.__setattr__`` on
# a frozen config, as nki-library does) but patch or read a module's namespace when used on one.
MODULE_ATTRS = frozenset({"__dict__", "__getattribute__", "__setattr__", "__delattr__"})


@dataclass(frozen=True)
class Finding:
    line: int
    column: int
    what: str


def findings(source: str) -> list[Finding]:
    """What ``source`` does to the process besides computing; empty when it only computes."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # loading reports it with its real location
    modules = _module_aliases(tree)
    out: list[Finding] = []
    for node in _kernel_code(tree):
        what = _check(node, modules)
        if what:
            out.append(Finding(getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1, what))
    return sorted(set(out), key=lambda f: (f.line, f.column))


def _kernel_code(tree: ast.Module) -> list[ast.AST]:
    """Every node that runs when the file is loaded as a kernel module (not its ``__main__`` driver)."""
    nodes: list[ast.AST] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and _is_main_guard(stmt.test):
            nodes.extend(n for s in stmt.orelse for n in ast.walk(s))
            continue
        nodes.extend(ast.walk(stmt))
    return nodes


def _is_main_guard(test: ast.expr) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


def _module_aliases(tree: ast.AST) -> set[str]:
    """Names bound to modules by ``import`` statements (``import numpy as np`` → ``np``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name.split(".")[0]) for a in node.names)
    return names


def _root(node: ast.expr) -> str:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _check(node: ast.AST, modules: set[str]) -> str:
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.name.split(".")[0] in TAMPER_MODULES:
                return f"imports {a.name}"
    if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in TAMPER_MODULES:
        return f"imports from {node.module}"
    if isinstance(node, ast.Attribute):
        if node.attr in TAMPER_ATTRS:
            return f"reaches interpreter internals (.{node.attr})"
        if node.attr in MODULE_ATTRS and _root(node.value) in modules and _root(node.value) != "object":
            return f"reaches the namespace of module `{_root(node.value)}` (.{node.attr})"
        if node.attr == "modules" and _root(node.value) == "sys":
            return "walks the loaded modules (sys.modules)"
        if isinstance(node.ctx, (ast.Store, ast.Del)) and _root(node.value) in modules:
            return f"rebinds an attribute of module `{_root(node.value)}` ({ast.unparse(node)} = ...)"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PATCHERS and node.args:
        first = node.args[0]
        if isinstance(first, (ast.Name, ast.Attribute)) and _root(first) in modules:
            return f"{node.func.id}() on module `{_root(first)}`"
    return ""
