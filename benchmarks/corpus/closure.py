"""Import-closure resolution: which files of a mirrored repo a kernel (or its test) needs.

Owns the ``ast``-based import scan, resolution of absolute and relative imports against the repo tree
at a commit (modules, ``__init__.py`` packages, namespace packages, sys.path roots), the transitive
closure with package ``__init__`` files, and the pytest support / small data files pulled in next to
an entry. Nothing here reads a working tree: the tree is ``Mirrors.tree`` (a set of repo paths).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import PurePosixPath
from typing import Iterable

from manifest import Mirrors

# Top-level modules that are never resolved inside a mirrored repo (the shim or pip provides them).
EXTERNAL_TOPS = {
    "nki", "neuronxcc", "numpy", "torch", "torch_xla", "torch_neuronx", "jax", "jaxlib", "scipy",
    "ml_dtypes", "pytest", "_pytest", "nki_cpu_simulator",
} | set(sys.stdlib_module_names)

# Packages that live in another mirrored repo: top-level name -> (repo, commit, sys.path root in it).
CROSS_REPO_PACKAGES: dict[str, tuple[str, str, str]] = {
    "nkilib": ("aws-neuron/nki-library", "d2ad3a579498d1888aa8740af97fd325dd5f2740", "src/nkilib_src"),
    "nkilib_src": ("aws-neuron/nki-library", "d2ad3a579498d1888aa8740af97fd325dd5f2740", "src"),
}

# The closure stops growing after this many files (a runaway import graph, not a kernel's needs).
MAX_CLOSURE_FILES = 600
# Non-Python files next to an entry that tests may open (configs, goldens).
DATA_SUFFIXES = {".json", ".yaml", ".yml", ".npy", ".npz", ".txt", ".csv", ".ini", ".cfg"}


def parent_dirs(path: str) -> list[str]:
    """Ancestor directories of a repo path, innermost first, ending with '' (the repo root)."""
    parts = PurePosixPath(path).parent.parts
    return ["/".join(parts[:i]) for i in range(len(parts), -1, -1)]


def join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def imported_modules(source: str) -> list[tuple[int, str, list[str]]]:
    """(level, module, imported names) for every import statement (also those inside functions)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return [(0, m, []) for m in re.findall(r"^\s*(?:from|import)\s+([\w.]+)", source, re.M)]
    found: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((0, a.name, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or "", [a.name for a in node.names]))
    return found


def module_files(tree: frozenset[str], base: str, dotted: str) -> str | None:
    """The file that defines module ``dotted`` under ``base`` (``x.py`` or ``x/__init__.py``)."""
    rel = dotted.replace(".", "/")
    for cand in (join(base, rel) + ".py", join(base, rel, "__init__.py")):
        if cand in tree:
            return cand
    return None


def resolve_import(
    tree: frozenset[str], importer: str, level: int, module: str, names: list[str]
) -> list[tuple[str, str]]:
    """Files (and their sys.path root) that an import statement in ``importer`` refers to."""
    hits: list[tuple[str, str]] = []
    if level > 0:
        base_parts = PurePosixPath(importer).parent.parts
        base_parts = base_parts[: len(base_parts) - (level - 1)] if level > 1 else base_parts
        base = "/".join(base_parts)
        if module:
            f = module_files(tree, base, module)
            if f:
                hits.append((f, ""))
        for n in names:
            f = module_files(tree, base, join(module.replace(".", "/"), n).replace("/", "."))
            if f:
                hits.append((f, ""))
        return hits
    if not module or module.split(".")[0] in EXTERNAL_TOPS:
        return hits
    for root in candidate_roots(tree, importer, module):
        parts = module.split(".")
        for k in range(len(parts), 0, -1):  # longest prefix that is a module (rest are attributes)
            f = module_files(tree, root, ".".join(parts[:k]))
            if f:
                hits.append((f, root))
                if k == len(parts):
                    for n in names:
                        g = module_files(tree, root, f"{module}.{n}")
                        if g:
                            hits.append((g, root))
                break
        if hits:
            return hits
    return hits


_ROOT_CACHE: dict[tuple[int, str], list[str]] = {}


def candidate_roots(tree: frozenset[str], importer: str, module: str) -> list[str]:
    """sys.path roots to try for an absolute import: the importer's ancestors, then any dir that has it."""
    roots = parent_dirs(importer)
    top = module.split(".")[0]
    key = (id(tree), top)
    if key not in _ROOT_CACHE:
        found: set[str] = set()
        for p in tree:  # modules, regular packages and namespace packages (dirs without __init__.py)
            q = "/" + p
            if q.endswith(f"/{top}.py"):
                found.add(p[: -len(f"{top}.py")].rstrip("/"))
            elif f"/{top}/" in q and p.endswith(".py"):
                found.add(q[: q.index(f"/{top}/")].lstrip("/"))
        extra = sorted(found, key=len)
        _ROOT_CACHE[key] = extra
    return roots + [r for r in _ROOT_CACHE[key] if r not in roots]


def package_inits(tree: frozenset[str], path: str, stop: str = "") -> list[str]:
    """``__init__.py`` files of every package directory containing ``path`` (below ``stop``)."""
    out = []
    for d in parent_dirs(path):
        if stop and not d.startswith(stop):
            break
        init = join(d, "__init__.py")
        if init in tree and init != path:
            out.append(init)
    return out


def import_closure(
    mirrors: Mirrors, repo: str, commit: str, seeds: Iterable[str]
) -> tuple[set[str], set[str], set[str]]:
    """Transitive in-repo imports of ``seeds``: (files, sys.path roots, unresolved cross-repo tops)."""
    tree = mirrors.tree(repo, commit)
    files: set[str] = set()
    roots: set[str] = set()
    cross: set[str] = set()
    todo = [s for s in seeds if s in tree]
    while todo and len(files) < MAX_CLOSURE_FILES:
        path = todo.pop()
        if path in files:
            continue
        files.add(path)
        for init in package_inits(tree, path):
            if init not in files:
                todo.append(init)
        if not path.endswith(".py"):
            continue
        for level, module, names in imported_modules(mirrors.text(repo, commit, path)):
            hits = resolve_import(tree, path, level, module, names)
            if not hits and level == 0 and module.split(".")[0] in CROSS_REPO_PACKAGES:
                cross.add(module.split(".")[0])
            for f, root in hits:
                if level == 0:
                    roots.add(root)
                for g in [f, *package_inits(tree, f, stop=root)]:
                    if g not in files:
                        todo.append(g)
    return files, roots, cross


def pytest_support_files(tree: frozenset[str], entry: str) -> list[str]:
    """conftest.py / pytest.ini files that pytest would load for ``entry``."""
    out = []
    for d in parent_dirs(entry):
        for name in ("conftest.py", "pytest.ini"):
            p = join(d, name)
            if p in tree:
                out.append(p)
    return out


def sibling_data_files(mirrors: Mirrors, repo: str, commit: str, path: str) -> list[str]:
    """Small non-Python files next to ``path`` (configs, goldens) that tests may open."""
    tree = mirrors.tree(repo, commit)
    d = str(PurePosixPath(path).parent)
    d = "" if d == "." else d
    out = []
    for p in tree:
        pp = PurePosixPath(p)
        if str(pp.parent if str(pp.parent) != "." else "") == d and pp.suffix in DATA_SUFFIXES:
            out.append(p)
    return out
