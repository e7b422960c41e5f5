"""The candidate kernel may change only itself: refuse code that reaches for the task, the reference
or the verifier.

Verification runs the task's reference and the kernel in one sandboxed process, so a kernel that
patches NumPy, imports the task module or rewrites files could fake a pass. Models do try this when
stuck ("make the test pass"). ``violations(code, task_path)`` lists what a candidate does that no
NKI kernel needs; a candidate with any violation is not run. Tool arguments that try to choose the
task, reference, tolerance or seeds are ignored by the tools (``IGNORED_ARGUMENTS``).
"""

from __future__ import annotations

import ast
import os

# Modules an NKI kernel file never needs and a cheating one would: files, processes, interpreter state.
FORBIDDEN_MODULES = frozenset({"os", "sys", "subprocess", "shutil", "pathlib", "importlib", "builtins", "ctypes",
                               "socket", "inspect", "gc", "pickle", "marshal", "signal", "threading",
                               "multiprocessing", "unittest", "pytest", "nki_agent", "nki_agent_task", "io"})
FORBIDDEN_CALLS = frozenset({"open", "exec", "eval", "compile", "__import__", "setattr", "delattr", "globals",
                             "vars", "breakpoint", "input"})
FORBIDDEN_NAMES = frozenset({"__builtins__", "__import__", "sys", "__loader__", "__spec__"})
# Arguments a model may try to pass to steer verification; the tools take the task from the user only.
IGNORED_ARGUMENTS = frozenset({"task", "reference", "tolerance", "atol", "rtol", "seeds", "seed", "inputs",
                               "task_path", "expected", "get_inputs"})


def violations(code: str, task_path: str | None = None) -> list[str]:
    """Reasons the candidate may not run (empty: fine). Unparsable code is fine here: the compiler
    reports the syntax error with its line."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    task_stem = os.path.splitext(os.path.basename(task_path))[0] if task_path else None
    imported: set[str] = set()
    found: list[str] = []

    def add(node: ast.AST, why: str) -> None:
        found.append(f"line {getattr(node, 'lineno', '?')}: {why}")

    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for alias in node.names:
                imported.add((alias.asname or alias.name).split(".")[0])
            for name in names:
                root = name.split(".")[0]
                if root in FORBIDDEN_MODULES:
                    add(node, f"imports {name!r}, which a kernel never needs")
                if task_stem and root == task_stem:
                    add(node, f"imports the task module {name!r} (the reference is not the kernel's to change)")
            if isinstance(node, ast.ImportFrom) and node.level:
                add(node, "relative import (the kernel must be self-contained)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            add(node, f"calls {node.func.id}(), which a kernel never needs")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            add(node, f"uses {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__") and node.attr not in ("__name__",):
            add(node, f"touches the dunder attribute {node.attr}")
        elif isinstance(node, ast.Global):
            add(node, "declares globals (kernels keep state in tensors)")
    for node in ast.walk(tree):  # writes into imported modules: np.allclose = ..., nl.add = ...
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for t in targets:
            base = t
            while isinstance(base, (ast.Attribute, ast.Subscript)):
                base = base.value
            if isinstance(t, ast.Attribute) and isinstance(base, ast.Name) and base.id in imported:
                add(node, f"assigns into the imported module {base.id!r} (monkeypatching)")
    return found


def new_violations(candidate: str, original: str, task_path: str | None = None) -> list[str]:
    """Violations of the candidate that the user's own kernel does not already have (a user kernel
    that imports ``os`` keeps doing so; the agent may not add it)."""
    def reason(v: str) -> str:
        return v.split(": ", 1)[-1]

    allowed = [reason(v) for v in violations(original, task_path)]
    out = []
    for v in violations(candidate, task_path):
        if reason(v) in allowed:
            allowed.remove(reason(v))
        else:
            out.append(v)
    return out


def ignored_arguments(arguments: dict[str, object]) -> list[str]:
    return sorted(k for k in arguments if k in IGNORED_ARGUMENTS)
