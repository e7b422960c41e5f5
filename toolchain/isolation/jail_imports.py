"""Which of the user's files a kernel's jail may see: the kernel file and the modules it imports, no more.

A jail that binds the kernel's whole folder (and every ``search_path`` folder) lets the kernel read
whatever lies beside it — ``.git/objects`` holding the task, editor backups (``task.py~``,
``.task.py.swp``), copies of the task, ``.env``. ``closure(entry, folders)`` instead reads the entry
file's source (never runs it) and collects every module it may import, wherever the statement is
(module level, functions, ``try``/``if``): ``import a.b``, ``from a import b`` (``b`` may be a
submodule), relative imports inside packages, ``importlib.import_module("a")`` / ``__import__("a")``
with a constant name. Each name resolves against ``folders`` in import order (the entry's own folder
first, then the search path), as Python's path finder does: a package folder ``a/`` with its
``__init__.py``, a module ``a.py`` (or an extension module / ``.pyc`` of that name), or a namespace
folder. Files found are scanned in turn. The result is the files to bind read-only at their own paths
(``__init__.py`` files included; bwrap creates the folders between). Names no folder holds are the
standard library's or installed packages (bound with the Python installation) and are skipped; a name
built at run time is not found, so the kernel cannot import it — nor read anything else of the folder.
Bounded: at most ``MAX_FILES`` files, sources above ``MAX_SOURCE`` bytes are bound but not scanned.
"""

from __future__ import annotations

import ast
import importlib.machinery
import os
from collections.abc import Iterable, Sequence

MAX_FILES = 512
MAX_SOURCE = 4 << 20
SUFFIXES = tuple(dict.fromkeys([".py", *importlib.machinery.EXTENSION_SUFFIXES, ".pyc"]))
IMPORTERS = {"import_module", "__import__"}  # calls whose constant first argument names a module


def imported_names(source: str, module: str = "", is_package: bool = False) -> list[str]:
    """Absolute dotted names ``source`` may import (``module``: its own dotted name, for relative imports;
    ``from a import b`` yields ``a`` and ``a.b``, since ``b`` may be a submodule)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    package = module if is_package else module.rpartition(".")[0]
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                if node.level - 1 > len(parts) or not package:
                    continue  # a relative import outside any package: fails in Python too
                head = ".".join(parts[: len(parts) - (node.level - 1)])
                base = f"{head}.{base}" if base else head
            if base:
                out.append(base)
                out += [f"{base}.{a.name}" for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            arg = node.args[0]
            if name in IMPORTERS and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.append(arg.value.lstrip("."))
    return [n for n in dict.fromkeys(out) if n and all(p.isidentifier() for p in n.split("."))]


def _module_file(folder: str, name: str) -> str:
    for suffix in SUFFIXES:
        p = os.path.join(folder, name + suffix)
        if os.path.isfile(p):
            return p
    return ""


def _find(portions: Sequence[str], name: str) -> tuple[str, list[str]]:
    """In the folders ``portions`` (in order): the file of ``name`` ("" if a namespace package or not
    found) and, if it is a package, the folders its submodules are searched in."""
    namespace: list[str] = []
    for folder in portions:
        pkg = os.path.join(folder, name)
        if os.path.isdir(pkg):
            init = _module_file(pkg, "__init__")
            if init:
                return init, [pkg]
        mod = _module_file(folder, name)
        if mod:
            return mod, []
        if os.path.isdir(pkg):
            namespace.append(pkg)
    return "", namespace


def closure(entry: str, folders: Sequence[str]) -> tuple[str, ...]:
    """The user's files ``entry`` may import, transitively (``entry`` itself first), found in ``folders``."""
    entry = os.path.abspath(entry)
    roots = [os.path.abspath(f) for f in dict.fromkeys(folders) if f and os.path.isdir(f)]
    files: dict[str, None] = {entry: None}
    todo: list[tuple[str, str, bool]] = [(entry, "", False)]
    seen: set[str] = set()
    while todo and len(files) < MAX_FILES:
        path, module, is_pkg = todo.pop()
        for name in _scan(path, module, is_pkg):
            if name in seen:
                continue
            seen.add(name)
            portions: list[str] = roots
            parts = name.split(".")
            for i, part in enumerate(parts):
                found, sub = _find(portions, part)
                dotted = ".".join(parts[: i + 1])
                if found and found not in files:
                    files[found] = None
                    if found.endswith(".py"):
                        todo.append((found, dotted, bool(sub)))
                if not sub:
                    break
                portions = sub
    return tuple(files)


def _scan(path: str, module: str, is_pkg: bool) -> list[str]:
    try:
        if os.path.getsize(path) > MAX_SOURCE:
            return []
        with open(path, "rb") as f:
            source = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return imported_names(source, module, is_pkg)


def binds(entries: Iterable[tuple[str, Sequence[str]]], hidden: Sequence[str] = ()) -> tuple[str, ...]:
    """Files to bind for several entry files, each with its folders; ``hidden`` files are never among them."""
    closed = {os.path.realpath(h) for h in hidden}
    out: dict[str, None] = {}
    for entry, folders in entries:
        for f in closure(entry, folders):
            if os.path.realpath(f) not in closed:
                out[f] = None
    return tuple(out)
