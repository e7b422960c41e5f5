"""Finding the workspace's pytest tests of a kernel file (``find_tests``), read, never run: a ``test_*.py`` /
``*_test.py`` file under the scope (``test_scope``: the workspace root, or the kernel's folder) that imports the
kernel's module and names one of its kernels in a ``test*`` function, best first. Each file's summary is cached
by (mtime, size), the scope's list of test files for ``WALK_TTL`` seconds. ``module_names``: the names a test
imports the kernel file by (so the worker can answer them all with the buffer's copy)."""

from __future__ import annotations

import ast
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .source import IDENT, dotted, parse

MAX_TEST_FILES = 4000  # test files looked at per discovery (a workspace of generated tests is cut here)
MAX_TEST_BYTES = 1 << 20
_PRUNE = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", "env", ".tox", ".nox", "build",
          "dist", "site-packages", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".eggs"}


@dataclass(frozen=True)
class TestRef:
    path: str  # absolute path of the test file
    node: str  # pytest node id after the path: "TestAdd::test_small" / "test_add"
    line: int
    score: int

    @property
    def label(self) -> str:
        """What the code lens shows: ``test_add.py::test_add``."""
        return f"{os.path.basename(self.path)}::{self.node}"


@dataclass
class _TestFile:
    imports: bool  # the file imports the module (by its last name)
    tests: list[tuple[str, int, frozenset[str], int]]  # (node id, line, names it refers to, score adjustment)
    aliases: dict[str, frozenset[str]]  # module-level name -> names its definition refers to


_CACHE: dict[tuple[str, str], tuple[tuple[int, int], _TestFile | None]] = {}
_CACHE_LOCK = threading.Lock()
_WALK: dict[str, tuple[float, list[str]]] = {}
WALK_TTL = 5.0  # seconds a workspace's list of test files is reused (a lens request per keystroke)


def _names(node: ast.AST) -> frozenset[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return frozenset(out)


def _imports(tree: ast.Module, module: str) -> bool:
    for n in ast.walk(tree):
        if isinstance(n, ast.Import) and any(a.name == module or a.name.endswith("." + module) for a in n.names):
            return True
        if isinstance(n, ast.ImportFrom):
            mod = n.module or ""
            if mod == module or mod.endswith("." + module) or any(a.name == module for a in n.names):
                return True
    return False


def _score(fn: ast.AST) -> int:
    names = _names(fn)
    decos = " ".join(dotted(d) for d in getattr(fn, "decorator_list", []))
    score = 0
    if "simulation" in decos or names & {"simulate_kernel", "simulate", "simulation_only"}:
        score += 2
    if names & {"benchmark", "benchmark_result", "profile", "nc_latency", "neuron_profile"}:
        score -= 3
    return score


def _summarise(path: str, module: str) -> _TestFile | None:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TEST_BYTES + 1)
    except OSError:
        return None
    if len(raw) > MAX_TEST_BYTES or b"\x00" in raw:
        return None
    text = raw.decode("utf-8", "replace")
    if module not in text:
        return _TestFile(False, [], {})
    tree = parse(text)
    if tree is None:
        return None
    tests: list[tuple[str, int, frozenset[str], int]] = []
    aliases: dict[str, frozenset[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("test"):
                tests.append((node.name, node.lineno, _names(node), _score(node)))
            else:
                aliases[node.name] = _names(node)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    tests.append((f"{node.name}::{item.name}", item.lineno, _names(item), _score(item)))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            refs = _names(node.value) if node.value is not None else frozenset()
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        aliases[n.id] = refs
    return _TestFile(_imports(tree, module), tests, aliases)


def _home_or_above(path: str) -> bool:
    home = os.path.realpath(os.path.expanduser("~"))
    p = os.path.realpath(path)
    return p == "/" or p == home or home.startswith(p.rstrip("/") + "/")


def test_scope(kernel_path: str, root: str | None) -> str:
    """The folder searched for tests: the workspace root when the kernel is inside it (and it is not the home
    folder or one of its ancestors), else the kernel's own folder."""
    folder = os.path.dirname(os.path.abspath(kernel_path))
    if root:
        r = os.path.abspath(root)
        if (folder == r or folder.startswith(r.rstrip("/") + "/")) and not _home_or_above(r):
            return r
    return folder


def _test_files(scope: str) -> list[str]:
    now = time.monotonic()
    with _CACHE_LOCK:
        hit = _WALK.get(scope)
        if hit is not None and now - hit[0] < WALK_TTL:
            return hit[1]
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(scope):
        dirnames[:] = sorted(d for d in dirnames if d not in _PRUNE and not d.startswith(".") and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            if name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")):
                out.append(os.path.join(dirpath, name))
        if len(out) >= MAX_TEST_FILES:
            break
    with _CACHE_LOCK:
        _WALK[scope] = (now, out)
    return out


def find_tests(kernel_path: str, kernels: Sequence[str], root: str | None) -> list[TestRef]:
    """Tests of the workspace that call a kernel of ``kernel_path`` (best first): a test file that imports the
    kernel's module and a ``test*`` function (or ``Test*`` method) naming one of ``kernels``, directly or
    through a module-level name or helper function of its own that does. Tests marked or written for the
    simulator rank first, benchmarks (which need hardware) last, then the nearest to the kernel."""
    if not kernels:
        return []
    module = os.path.splitext(os.path.basename(kernel_path))[0]
    scope = test_scope(kernel_path, root)
    folder = os.path.dirname(os.path.abspath(kernel_path))
    wanted = set(kernels)
    found: list[tuple[int, int, str, int, TestRef]] = []
    for path in _test_files(scope):
        if os.path.abspath(path) == os.path.abspath(kernel_path):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        key, stamp = (path, module), (st.st_mtime_ns, st.st_size)
        with _CACHE_LOCK:
            hit = _CACHE.get(key)
        if hit is not None and hit[0] == stamp:
            summary = hit[1]
        else:
            summary = _summarise(path, module)
            with _CACHE_LOCK:
                if len(_CACHE) > 4 * MAX_TEST_FILES:
                    _CACHE.clear()
                _CACHE[key] = (stamp, summary)
        if summary is None or not summary.imports:
            continue
        reach = {a for a, refs in summary.aliases.items() if refs & wanted}
        for node, line, names, adjust in summary.tests:
            if names & wanted or names & reach:
                distance = len(os.path.relpath(path, folder).split(os.sep))
                ref = TestRef(path, node, line, adjust)
                found.append((-adjust, distance, path, line, ref))
    found.sort(key=lambda x: x[:4])
    return [f[4] for f in found]


def module_names(kernel_path: str) -> list[str]:
    """The names the kernel file is imported by: its file name, and its dotted name inside a package."""
    folder, base = os.path.split(os.path.abspath(kernel_path))
    stem = os.path.splitext(base)[0]
    names = [stem]
    parts = [stem]
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parts.insert(0, os.path.basename(folder))
        folder = os.path.dirname(folder)
        names.append(".".join(parts))
    return [n for n in names if all(IDENT.match(p) for p in n.split("."))]


__all__ = ["MAX_TEST_BYTES", "MAX_TEST_FILES", "WALK_TTL", "TestRef", "find_tests", "module_names", "test_scope"]
