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
# Builtins a kernel never needs; any USE counts (aliasing `_e = exec` or `[exec][0]` is a use).
FORBIDDEN_BUILTINS = frozenset({"open", "exec", "eval", "compile", "__import__", "setattr", "delattr", "getattr",
                                "globals", "locals", "vars", "breakpoint", "input", "type", "object", "memoryview",
                                "classmethod", "staticmethod", "property", "super", "__build_class__"})
FORBIDDEN_NAMES = FORBIDDEN_BUILTINS | {"__builtins__", "sys", "__loader__", "__spec__", "__file__"}
# NumPy entry points that read or write files: a kernel moves data with NKI loads/stores only.
FILE_METHODS = frozenset({"tofile", "dump"})  # ndarray methods that write files, on any receiver
NUMPY_FILE_FUNCTIONS = frozenset({"fromfile", "save", "savez", "savez_compressed", "savetxt", "load", "loadtxt",
                                  "genfromtxt", "memmap", "DataSource", "fromregex", "lib", "testing"})
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
    numpy = {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names if a.name.split(".")[0] == "numpy"}
    found: list[str] = []

    def add(node: ast.AST, why: str) -> None:
        found.append(f"line {getattr(node, 'lineno', '?')}: {why}")

    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for alias in node.names:
                imported.add((alias.asname or alias.name).split(".")[0])
                if alias.name == "*":
                    add(node, "star import (names must be explicit)")
            for name in names:
                root = name.split(".")[0]
                if root in FORBIDDEN_MODULES:
                    add(node, f"imports {name!r}, which a kernel never needs")
                if task_stem and root == task_stem:
                    add(node, f"imports the task module {name!r} (the reference is not the kernel's to change)")
            if isinstance(node, ast.ImportFrom) and node.level:
                add(node, "relative import (the kernel must be self-contained)")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            add(node, f"uses {node.id}, which a kernel never needs")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            add(node, f"touches the private attribute {node.attr}")
        elif isinstance(node, ast.Attribute) and (node.attr in FILE_METHODS or (
                node.attr in NUMPY_FILE_FUNCTIONS and isinstance(node.value, ast.Name) and node.value.id in numpy)):
            add(node, f"uses .{node.attr} (file access; kernels move data with NKI loads and stores)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("__"):
            add(node, "spells a dunder name in a string")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            add(node, "declares globals (kernels keep state in tensors)")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = list(node.targets) if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                        add(node, f"assigns to the attribute .{sub.attr} (kernels write tensors, not objects)")
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


# Top-level names of a task module: in a kernel file that is its own task they are the user's spec.
TASK_NAMES = frozenset({"get_inputs", "get_init_inputs", "reference", "Model", "TOLERANCE", "GRID", "LNC", "KERNEL",
                        "TARGET", "ALLOW_INPUT_MUTATION"})


def task_definitions(code: str) -> dict[str, str] | None:
    """``ast.dump`` of each top-level task definition (None when the code does not parse)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in TASK_NAMES:
            out[node.name] = ast.dump(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id in TASK_NAMES:
                    out[t.id] = ast.dump(node)
    return out


def task_changes(candidate: str, original: str) -> list[str]:
    """Task definitions (reference, inputs, tolerance...) the candidate changed, added or removed."""
    before, after = task_definitions(original), task_definitions(candidate)
    if before is None or after is None:
        return []
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def ignored_arguments(arguments: dict[str, object]) -> list[str]:
    return sorted(k for k in arguments if k in IGNORED_ARGUMENTS)
