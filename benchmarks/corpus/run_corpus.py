#!/usr/bin/env python3
"""Run the public NKI kernel corpus through the embedded simulator and report what happens.

The corpus (``kernel-corpus.tsv``) lists third-party kernel files by (repo, commit, path). Their code
is never stored in this repository: for every row this script reads the file (plus the tests that
check it and the in-repo modules they import) from local bare git mirrors, writes them into a fresh
temporary tree that mirrors the repo layout, and runs the best standalone entry point in a
subprocess through the import shim::

    python -m nki_agent.toolchain.shim FILE                 # like ``python FILE``
    python -m nki_agent.toolchain.shim -m pytest FILE -x -q  # pytest in shim mode

Each row gets one outcome (see README.md): pass, mismatch, ran, sim_error, unsupported,
import_error, crash, no_entry, timeout.

Usage::

    NKI_CORPUS_MIRRORS=/path/to/mirrors python benchmarks/corpus/run_corpus.py --out results.json
"""

from __future__ import annotations

import argparse
import ast
import collections
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterable

# --------------------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------------------

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MANIFEST = REPO_ROOT.parent / "shared" / "docs" / "kernel-corpus.tsv"
MIRRORS_ENV = "NKI_CORPUS_MIRRORS"

OUTCOMES = (
    "pass", "mismatch", "ran", "sim_error", "unsupported", "import_error", "crash", "no_entry", "timeout",
)

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

# pytest arguments that select the simulation-capable tests, used when an extracted conftest.py
# defines the option (nki-samples test/unit: --simulation-only; nki-library: --test-mode).
PYTEST_EXTRA_ARGS: dict[str, list[str]] = {
    "--simulation-only": ["--simulation-only", "-m", "simulation"],
    "--test-mode": ["--test-mode", "simulation", "-m", "fast"],
}

# NKI error ids that mean "the simulator does not model this API".
UNSUPPORTED_CODES = {"sim_unsupported_api", "sim_removed_api"}

MAX_CLOSURE_FILES = 600
MAX_DATA_FILE_BYTES = 2_000_000
DATA_SUFFIXES = {".json", ".yaml", ".yml", ".npy", ".npz", ".txt", ".csv", ".ini", ".cfg"}

FAIL_MARKERS = re.compile(
    r"(\bdiffer\b|\bdiffers\b|\bmismatch|\bdo(?:es)? not match|\bdon't match|\btest failed\b|"
    r"\bnot (?:all)?close\b|\bincorrect\b|\bFAIL(?:ED)?\b|\bwrong\b)",
    re.IGNORECASE,
)
PASS_MARKERS = re.compile(
    r"(\bmatch(?:es)?\b|\btest passed\b|\bpassed\b|\bcorrect\b|\bPASS\b|\bsuccess|CORPUS_CHECK: PASS)",
    re.IGNORECASE,
)
CHECK_HINT = re.compile(r"allclose|assert|array_equal|testing\.|isclose|differ|match", re.IGNORECASE)
NKI_CODE = re.compile(
    r"(?:(?P<path>[^\s:\"']+\.py):(?P<line>\d+):\s*)?\[(?P<code>(?:err|sim)_[a-z0-9_]+)\]\s*(?P<msg>[^\n]*)"
)
EXC_LINE = re.compile(
    r"^(?:E\s+)?(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|NotImplemented\w*|Warning))"
    r"(?::\s?(?P<msg>.*))?$"
)
PYTEST_SUMMARY = re.compile(r"^(?:FAILED|ERROR) (?P<node>\S+)(?: - (?P<rest>.*))?$")
FRAME = re.compile(r'^\s*(?:File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)'
                   r'|(?P<spath>\S+\.py):(?P<sline>\d+): in (?P<sfn>\S+))')


# --------------------------------------------------------------------------------------------------
# Data model
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One manifest row (a kernel source file at a commit)."""

    repo: str
    commit: str
    path: str
    api: str
    kernel_functions: str
    has_reference_test: str
    framework_ref: str
    self_contained: str
    notes: str
    ref_kind: str

    @property
    def key(self) -> str:
        return f"{self.repo}@{self.commit[:8]}:{self.path}"


@dataclass
class Plan:
    """What to extract and how to run one row."""

    entry_kind: str  # sdk_unittest | pytest | script | autocomp_harness | nkibench_driver | none
    entry: str = ""  # path inside the temp tree of the file to run
    check: str = "none"  # where the reference check lives: self | test | harness | reference-module | none
    command: list[str] = field(default_factory=list)  # after "python -m nki_agent.toolchain.shim"
    files: set[tuple[str, str, str, str]] = field(default_factory=set)  # (repo, commit, src, dest)
    generated: dict[str, str] = field(default_factory=dict)  # dest -> text
    pythonpath: list[str] = field(default_factory=list)  # temp-tree relative roots
    reason: str = ""


@dataclass
class Result:
    """The outcome of one row."""

    repo: str
    commit: str
    path: str
    api: str
    entry_kind: str
    entry: str
    check: str
    outcome: str
    detail: str = ""
    nki_code: str | None = None
    nki_message: str | None = None
    nki_line: str | None = None
    missing_api: str | None = None
    missing_module: str | None = None
    exception: str | None = None
    crash_site: str | None = None
    tests: dict[str, int] = field(default_factory=dict)
    returncode: int | None = None
    seconds: float = 0.0
    probe: str | None = None
    post_check_error: str | None = None
    detail_where: str | None = None
    command: str = ""
    output_tail: str = ""


# --------------------------------------------------------------------------------------------------
# Manifest and mirrors
# --------------------------------------------------------------------------------------------------


def read_manifest(path: Path) -> list[Row]:
    """Read the TSV manifest into rows."""
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh, delimiter="\t")
        return [
            Row(
                repo=r["repo"], commit=r["commit"], path=r["path"], api=r.get("api", ""),
                kernel_functions=r.get("kernel_functions", ""),
                has_reference_test=r.get("has_reference_test", ""),
                framework_ref=r.get("framework_ref", ""), self_contained=r.get("self_contained", ""),
                notes=r.get("notes", ""), ref_kind=r.get("ref_kind", ""),
            )
            for r in reader
        ]


class Mirrors:
    """Read-only access to bare git mirrors (``DIR/owner+name/repo``, ``DIR/owner+name`` or ``DIR/owner/name``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._trees: dict[tuple[str, str], frozenset[str]] = {}
        self._blobs: dict[tuple[str, str, str], bytes | None] = {}
        self._lock = threading.Lock()

    def git_dir(self, repo: str) -> Path | None:
        owner, name = repo.split("/", 1)
        for cand in (self.root / f"{owner}+{name}" / "repo", self.root / f"{owner}+{name}",
                     self.root / owner / name, self.root / owner / f"{name}.git"):
            if (cand / "HEAD").exists() and ((cand / "objects").exists() or (cand / ".git").exists()):
                return cand
            if (cand / ".git" / "HEAD").exists():
                return cand / ".git"
        return None

    def _git(self, repo: str, *args: str) -> bytes:
        gd = self.git_dir(repo)
        if gd is None:
            raise FileNotFoundError(f"no mirror for {repo} under {self.root}")
        return subprocess.run(["git", f"--git-dir={gd}", *args], check=True, capture_output=True).stdout

    def has_commit(self, repo: str, commit: str) -> bool:
        try:
            self._git(repo, "cat-file", "-e", f"{commit}^{{commit}}")
            return True
        except (subprocess.CalledProcessError, FileNotFoundError):
            return False

    def tree(self, repo: str, commit: str) -> frozenset[str]:
        key = (repo, commit)
        with self._lock:
            if key in self._trees:
                return self._trees[key]
        out = self._git(repo, "ls-tree", "-r", "--name-only", "-z", commit)
        paths = frozenset(p for p in out.decode().split("\0") if p)
        with self._lock:
            self._trees[key] = paths
        return paths

    def read(self, repo: str, commit: str, path: str) -> bytes | None:
        key = (repo, commit, path)
        with self._lock:
            if key in self._blobs:
                return self._blobs[key]
        try:
            data: bytes | None = self._git(repo, "show", f"{commit}:{path}")
        except subprocess.CalledProcessError:
            data = None
        with self._lock:
            self._blobs[key] = data
        return data

    def text(self, repo: str, commit: str, path: str) -> str:
        data = self.read(repo, commit, path)
        return data.decode("utf-8", errors="replace") if data is not None else ""


# --------------------------------------------------------------------------------------------------
# Import closure
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# Entry selection
# --------------------------------------------------------------------------------------------------


def split_refs(field_value: str) -> list[str]:
    return [x.strip() for x in field_value.split(";") if x.strip() and x.strip() != "none"]


def has_main(source: str) -> bool:
    return bool(re.search(r"""^if\s+__name__\s*==\s*['"]__main__['"]""", source, re.M))


def has_toplevel_driver(source: str) -> bool:
    """True when module-level statements (outside defs/classes/imports) call something: a driver."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    for node in tree.body:
        if isinstance(node, (ast.Expr, ast.Assert)) and any(isinstance(n, ast.Call) for n in ast.walk(node)):
            if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
                return True
    return False


def is_test_module(path: str, source: str) -> bool:
    """True for files pytest would collect tests from (unittest classes or test_ functions)."""
    name = PurePosixPath(path).name
    if not (name.startswith("test_") or name.endswith("_test.py")):
        return False
    return bool(re.search(r"^\s*(?:async\s+)?def test_|unittest\.TestCase|^class Test", source, re.M))


def test_rank(source: str) -> int:
    """Lower is better: prefer tests that do not need jax / torch_xla / hardware."""
    rank = 0
    if re.search(r"^\s*(?:import|from)\s+jax", source, re.M):
        rank += 4
    if "torch_xla" in source:
        rank += 2
    if re.search(r"^\s*(?:import|from)\s+torch", source, re.M):
        rank += 1
    return rank


def plan_row(mirrors: Mirrors, row: Row) -> Plan:
    """Pick the best runnable entry for a row and the files it needs."""
    src = mirrors.text(row.repo, row.commit, row.path)
    refs = split_refs(row.has_reference_test)
    if row.repo == "ucb-bar/autocomp" and refs:
        return plan_autocomp(mirrors, row, src, refs[0])
    if any("NKIBench/reference/" in r for r in refs):
        return plan_nkibench(mirrors, row, next(r for r in refs if "NKIBench/reference/" in r))
    if "(self)" in refs:
        if is_test_module(row.path, src):
            return plan_pytest(mirrors, row, [row.path], check="self",
                               kind="sdk_unittest" if "unittest" in src else "pytest")
        if has_main(src) or has_toplevel_driver(src):
            return plan_script(mirrors, row, row.path, check="self")
    tests = [r for r in refs if r != "(self)" and ":" not in r]
    tests = sorted(tests, key=lambda t: test_rank(mirrors.text(row.repo, row.commit, t)))
    py_tests = [t for t in tests if is_test_module(t, mirrors.text(row.repo, row.commit, t))]
    if py_tests:
        best = min(test_rank(mirrors.text(row.repo, row.commit, t)) for t in py_tests)
        chosen = [t for t in py_tests if test_rank(mirrors.text(row.repo, row.commit, t)) == best]
        return plan_pytest(mirrors, row, chosen, check="test", kind="pytest")
    for t in tests:
        if has_main(mirrors.text(row.repo, row.commit, t)):
            return plan_script(mirrors, row, t, check="test")
    if has_main(src):
        return plan_script(mirrors, row, row.path, check="self" if CHECK_HINT.search(main_block(src)) else "none")
    plan = Plan(entry_kind="none", reason=no_entry_reason(row, refs))
    add_closure(mirrors, row, plan, [row.path])
    return plan


def main_block(source: str) -> str:
    m = re.search(r"""^if\s+__name__\s*==\s*['"]__main__['"].*""", source, re.M | re.S)
    return m.group(0) if m else ""


def no_entry_reason(row: Row, refs: list[str]) -> str:
    if any(":" in r and r != "(self)" for r in refs):
        return "reference test lives in another repo"
    if "assignment stub" in row.notes:
        return "assignment stub"
    if row.kernel_functions.startswith("(none"):
        return "sub-kernel/helper module (no entry kernel, no test imports it directly)"
    return "no __main__ driver and no test in the repo"


def add_closure(mirrors: Mirrors, row: Row, plan: Plan, seeds: list[str], pytest_mode: bool = False) -> None:
    """Add ``seeds`` + their in-repo (and known cross-repo) import closure to the plan."""
    tree = mirrors.tree(row.repo, row.commit)
    seeds = list(seeds)
    if pytest_mode:
        for s in list(seeds):
            seeds.extend(pytest_support_files(tree, s))
    for s in list(seeds):
        seeds.extend(sibling_data_files(mirrors, row.repo, row.commit, s))
    files, roots, cross = import_closure(mirrors, row.repo, row.commit, seeds)
    plan.files |= {(row.repo, row.commit, f, f) for f in files}
    plan.pythonpath = sorted({r for r in roots if r} | set(plan.pythonpath))
    for top in sorted(cross):
        add_cross_repo_package(mirrors, plan, top)


def add_cross_repo_package(mirrors: Mirrors, plan: Plan, top: str) -> None:
    """Extract a package that lives in another mirrored repo under ``_xrepo/`` and put it on sys.path."""
    repo, commit, root = CROSS_REPO_PACKAGES[top]
    if mirrors.git_dir(repo) is None:
        return
    tree = mirrors.tree(repo, commit)
    prefix = join(root, top) + "/"
    dest_root = join("_xrepo", repo.replace("/", "+"))
    for p in tree:
        if p.startswith(prefix) and p.endswith(".py"):
            plan.files.add((repo, commit, p, join(dest_root, p)))
    for init in package_inits(tree, join(prefix, "x.py")):
        plan.files.add((repo, commit, init, join(dest_root, init)))
    plan.pythonpath = sorted(set(plan.pythonpath) | {join(dest_root, root)})


def plan_script(mirrors: Mirrors, row: Row, entry: str, check: str) -> Plan:
    plan = Plan(entry_kind="script", entry=entry, check=check, command=[entry])
    add_closure(mirrors, row, plan, [entry, row.path])
    return plan


def plan_pytest(mirrors: Mirrors, row: Row, tests: list[str], check: str, kind: str) -> Plan:
    plan = Plan(entry_kind=kind, entry=tests[0], check=check,
                command=["-m", "pytest", *tests, "-x", "-q", "-p", "_corpus_plugin", "-p", "no:cacheprovider",
                         "-rfE", "--tb=short"])
    add_closure(mirrors, row, plan, [*tests, row.path], pytest_mode=True)
    conftests = "\n".join(mirrors.text(r, c, src) for r, c, src, _ in plan.files if src.endswith("conftest.py"))
    for option, extra in PYTEST_EXTRA_ARGS.items():
        if f'"{option}"' in conftests or f"'{option}'" in conftests:
            plan.command.extend(extra)
    plan.generated["_corpus_plugin.py"] = PYTEST_PLUGIN
    if not any(f[3] in ("pytest.ini", "conftest.py") for f in plan.files):
        plan.generated.setdefault("pytest.ini", "[pytest]\n")
    return plan


def plan_autocomp(mirrors: Mirrors, row: Row, src: str, harness: str) -> Plan:
    """autocomp solutions have no imports: paste them into their harness at ``# SUBSTITUTE HERE``."""
    htext = mirrors.text(row.repo, row.commit, harness)
    if "# SUBSTITUTE HERE" not in htext:
        return Plan(entry_kind="none", reason=f"harness {harness} has no '# SUBSTITUTE HERE' marker")
    plan = Plan(entry_kind="autocomp_harness", entry=harness, check="harness", command=[harness])
    plan.generated[harness] = htext.replace("# SUBSTITUTE HERE", src, 1)
    add_closure(mirrors, row, plan, [harness])
    plan.files = {f for f in plan.files if f[3] != harness}
    return plan


def plan_nkibench(mirrors: Mirrors, row: Row, ref: str) -> Plan:
    """NKIBench kernels: generate a driver from the numpy reference module (AccelOpt's own l2 check)."""
    if ":" in ref:
        ref_repo, ref_path = ref.split(":", 1)
        ref_commit = _known_commit(ref_repo)
        ref_dest = join("_xrepo", ref_repo.replace("/", "+"), ref_path)
    else:
        ref_repo, ref_path, ref_commit, ref_dest = row.repo, ref, row.commit, ref
    plan = Plan(entry_kind="nkibench_driver", entry="_corpus_driver.py", check="reference-module",
                command=["_corpus_driver.py"])
    if ref_commit is None or mirrors.read(ref_repo, ref_commit, ref_path) is None:
        return Plan(entry_kind="none", reason=f"reference module {ref} not available in mirrors")
    plan.files.add((ref_repo, ref_commit, ref_path, ref_dest))
    add_closure(mirrors, row, plan, [row.path])
    kernel_name = (row.kernel_functions.split(",")[0] or "kernel").strip()
    plan.generated["_corpus_driver.py"] = NKIBENCH_DRIVER.format(
        kernel_path=row.path, ref_path=ref_dest, kernel_name=kernel_name)
    return plan


_COMMITS: dict[str, str] = {}


def _known_commit(repo: str) -> str | None:
    return _COMMITS.get(repo)


def plan_probe(row: Row, plan: Plan, mirrors: Mirrors) -> str:
    """A driver that only imports the kernel module (used for rows without an entry)."""
    tree = mirrors.tree(row.repo, row.commit)
    parts = list(PurePosixPath(row.path).with_suffix("").parts)
    root_idx = len(parts) - 1
    while root_idx > 0 and join(*parts[:root_idx], "__init__.py") in tree:
        root_idx -= 1
    root = "/".join(parts[:root_idx])
    dotted = ".".join(parts[root_idx:])
    return PROBE_DRIVER.format(root=root, dotted=dotted)


# --------------------------------------------------------------------------------------------------
# Generated helper files (our code, not corpus code)
# --------------------------------------------------------------------------------------------------

PYTEST_PLUGIN = '''"""Harness pytest plugin.

* pretend to be a trn2 host for tests that gate on /sys/devices/virtual/dmi/id/product_name;
* do not collect module-level NKI kernels whose name starts with ``test`` (they are kernels, not tests).
"""
import builtins
import inspect
import io


def pytest_pycollect_makeitem(collector, name, obj):
    if callable(obj) and not inspect.isfunction(obj) and not inspect.isclass(obj) \\
            and type(obj).__module__.startswith(("nki_agent", "nki", "neuronxcc")):
        return []
    return None

_real_open = builtins.open


def _open(file, *args, **kwargs):
    if str(file) == "/sys/devices/virtual/dmi/id/product_name":
        return io.StringIO("trn2.48xlarge\\n")
    return _real_open(file, *args, **kwargs)


builtins.open = _open
'''

NKIBENCH_DRIVER = '''"""Harness-generated driver for an NKIBench kernel (AccelOpt eval_numpy.py check, rel l2 < 2e-5)."""
import importlib.util
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def load(rel, name):
    path = os.path.join(HERE, rel)
    sys.path.insert(0, os.path.dirname(path))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ref = load({ref_path!r}, "corpus_reference")
ker = load({kernel_path!r}, "corpus_kernel")
np.random.seed(0)
inputs = ref.get_inputs()
expected = ref.forward(*inputs)
out = getattr(ker, {kernel_name!r})(*ref.transform_to_nki_inputs(inputs))
outs = ref.transform_nki_outputs(out, expected)
exp = expected if isinstance(expected, tuple) else (expected,)
ok = len(outs) == len(exp)
for i, (k, r) in enumerate(zip(outs, exp)):
    k = np.asarray(k, dtype=np.float64)
    r = np.asarray(r, dtype=np.float64)
    if k.shape != r.shape:
        print(f"output {{i}}: shape {{k.shape}} != {{r.shape}}")
        ok = False
        continue
    rel = np.linalg.norm(k - r) / max(np.linalg.norm(r), 1e-30)
    print(f"output {{i}}: rel l2 error {{rel:.3e}}")
    ok = ok and rel < 2e-5
print("CORPUS_CHECK: PASS" if ok else "CORPUS_CHECK: MISMATCH")
sys.exit(0 if ok else 3)
'''

PROBE_DRIVER = '''"""Harness-generated import probe."""
import importlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), {root!r}))
importlib.import_module({dotted!r})
print("CORPUS_PROBE: IMPORT_OK")
'''


# --------------------------------------------------------------------------------------------------
# Materialise and run
# --------------------------------------------------------------------------------------------------


def materialise(mirrors: Mirrors, plan: Plan, dest: Path) -> None:
    """Write the plan's files into ``dest`` (a temp tree mirroring the repo layout)."""
    for repo, commit, src, rel in sorted(plan.files):
        data = mirrors.read(repo, commit, src)
        if data is None:
            continue
        if len(data) > MAX_DATA_FILE_BYTES and not src.endswith(".py"):
            continue
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    for rel, text in plan.generated.items():
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)


def run_subprocess(
    python: str, args: list[str], cwd: Path, pythonpath: list[Path], timeout: float
) -> tuple[int | None, str, str, bool, float]:
    """Run ``python -m nki_agent.toolchain.shim ARGS``; returns (rc, stdout, stderr, timed_out, secs)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in pythonpath), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    env.update(PYTHONDONTWRITEBYTECODE="1", MPLBACKEND="Agg", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONHASHSEED="0", PYTHONUNBUFFERED="1")
    t0 = time.monotonic()
    proc = subprocess.Popen([python, "-m", "nki_agent.toolchain.shim", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        timed_out = True
    return (None if timed_out else proc.returncode, out.decode(errors="replace"),
            err.decode(errors="replace"), timed_out, time.monotonic() - t0)


def run_row(mirrors: Mirrors, row: Row, python: str, timeout: float, keep: Path | None) -> Result:
    """Plan, extract, run and classify one row."""
    try:
        plan = plan_row(mirrors, row)
    except Exception as exc:  # planning must never kill the whole run
        return base_result(row, Plan(entry_kind="none"), "crash", detail=f"harness planning failed: {exc!r}")
    tmp = Path(tempfile.mkdtemp(prefix="nki-corpus-"))
    try:
        if plan.entry_kind == "none":
            plan.generated["_corpus_probe.py"] = plan_probe(row, plan, mirrors)
            materialise(mirrors, plan, tmp)
            rc, out, err, to, secs = run_subprocess(python, ["_corpus_probe.py"], tmp, [tmp], timeout)
            res = base_result(row, plan, "no_entry", detail=plan.reason)
            probe = classify(plan, rc, out, err, to, tmp)
            res.probe = "import_ok" if rc == 0 else f"{probe.outcome}: {probe.detail}"
            res.missing_api = probe.missing_api if rc else None
            res.missing_module = probe.missing_module if rc else None
            res.seconds = secs
            return res
        materialise(mirrors, plan, tmp)
        cwd = tmp / PurePosixPath(plan.entry).parent
        paths = [tmp, *(tmp / p for p in plan.pythonpath)]
        command = [str(tmp / a) if (tmp / a).is_file() else a for a in plan.command]
        rc, out, err, to, secs = run_subprocess(python, command, cwd, paths, timeout)
        res = classify(plan, rc, out, err, to, tmp)
        fill_row(res, row, plan)
        res.seconds = round(secs, 2)
        res.returncode = rc
        res.command = "python -m nki_agent.toolchain.shim " + " ".join(plan.command)
        res.output_tail = tail(err if err.strip() else out, 2500).replace(str(tmp) + "/", "")
        return res
    finally:
        if keep is not None:
            target = keep / row.key.replace("/", "+").replace(":", "+")
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(tmp, target)
        shutil.rmtree(tmp, ignore_errors=True)


def base_result(row: Row, plan: Plan, outcome: str, detail: str = "") -> Result:
    res = Result(repo=row.repo, commit=row.commit, path=row.path, api=row.api, entry_kind=plan.entry_kind,
                 entry=plan.entry, check=plan.check, outcome=outcome, detail=detail)
    return res


def fill_row(res: Result, row: Row, plan: Plan) -> None:
    res.repo, res.commit, res.path, res.api = row.repo, row.commit, row.path, row.api
    res.entry_kind, res.entry, res.check = plan.entry_kind, plan.entry, plan.check


def tail(text: str, n: int) -> str:
    return text if len(text) <= n else "…" + text[-n:]


# --------------------------------------------------------------------------------------------------
# Classification
# --------------------------------------------------------------------------------------------------


def short_api(name: str) -> str:
    """Normalise module paths to the usual aliases (``neuronxcc.nki.isa.x`` -> ``nisa.x``)."""
    name = name.strip().strip("'\"")
    for prefix, alias in (("neuronxcc.nki.language", "nl"), ("nki.language", "nl"),
                          ("neuronxcc.nki.isa", "nisa"), ("nki.isa", "nisa"),
                          ("neuronxcc.nki.compiler", "ncc"), ("nki.compiler", "ncc"),
                          ("neuronxcc.nki", "nki"), ("nki", "nki")):
        if name == prefix:
            return alias
        if name.startswith(prefix + "."):
            return alias + name[len(prefix):]
    return name


def is_nki_module(name: str) -> bool:
    return name.split(".")[0] in {"nki", "neuronxcc", "nki_cpu_simulator"}


def last_exception(text: str) -> tuple[str, str]:
    """The last ``Type: message`` line of a traceback (or pytest ``E`` line)."""
    found = ("", "")
    for line in text.splitlines():
        m = EXC_LINE.match(line.rstrip())
        if m and not line.startswith(" "):
            found = (m.group("type"), (m.group("msg") or "").strip())
        elif line.startswith("E ") and m:
            found = (m.group("type"), (m.group("msg") or "").strip())
    return found


def pytest_failure(text: str) -> tuple[str, str, str]:
    """(node, exc type, message) of the first FAILED/ERROR line in pytest's short summary."""
    for line in text.splitlines():
        m = PYTEST_SUMMARY.match(line.strip())
        if m:
            rest = m.group("rest") or ""
            em = EXC_LINE.match(rest)
            if em:
                return m.group("node"), em.group("type"), (em.group("msg") or "").strip()
            return m.group("node"), "", rest
    return "", "", ""


def pytest_counts(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in reversed(text.splitlines()):
        if re.search(r"\b(passed|failed|error|errors|skipped|deselected|no tests ran)\b", line) and (
                " in " in line or line.startswith("=")):
            for n, what in re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed)", line):
                counts[what.rstrip("s") if what.startswith("error") else what] = int(n)
            if counts:
                break
    return counts


def innermost_frame(text: str, tmp: Path) -> tuple[str, str]:
    """(site, 'file:line') of the innermost traceback frame; site is simulator/corpus/other."""
    frames = [m for m in (FRAME.match(line) for line in text.splitlines()) if m]
    if not frames:
        return "", ""
    m = frames[-1]
    path = m.group("path") or m.group("spath")
    line, fn = m.group("line") or m.group("sline"), m.group("fn") or m.group("sfn")
    where = f"{path.replace(str(tmp) + '/', '')}:{line} in {fn}"
    if "nki_agent" in path or "/toolchain/" in path:
        return "simulator", where
    if path.startswith(str(tmp)):
        return "corpus", where
    return "library", where


def assertion_is_check(text: str) -> bool:
    """Whether an AssertionError comes from a reference comparison (vs. an assert inside a kernel)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("AssertionError") or line.startswith("E   AssertionError") or "AssertionError" in line:
            ctx = "\n".join(lines[max(0, i - 6): i + 3])
            if re.search(r"allclose|array_equal|assert_equal|isclose|Not equal|Mismatch|is not true|"
                         r"assertTrue|assertEqual|testing|max_diff|tolerance|match|==", ctx):
                return True
    return False


def classify(plan: Plan, rc: int | None, out: str, err: str, timed_out: bool, tmp: Path) -> Result:
    """Turn a finished subprocess into an outcome."""
    text = out + "\n" + err
    res = Result(repo="", commit="", path="", api="", entry_kind=plan.entry_kind, entry=plan.entry,
                 check=plan.check, outcome="crash")
    is_pytest = "pytest" in plan.command[:2]
    if is_pytest:
        res.tests = pytest_counts(out)
    if timed_out:
        res.outcome, res.detail = "timeout", "subprocess timed out"
        return res
    nki = [m for m in NKI_CODE.finditer(text)]
    if rc == 0:
        return classify_success(plan, res, out, is_pytest, nki)
    if is_pytest and rc == 5:
        res.outcome, res.detail = "no_entry", "pytest collected no tests (after marker selection)"
        return res
    if is_pytest and rc == 4 and "while loading conftest" not in text:
        res.outcome, res.detail = "crash", "pytest usage error: " + first_line_matching(text, r"error:")
        res.crash_site = "harness"
        return res
    if not is_pytest and plan.check in ("harness", "self", "test") and re.search(
            r"\btests? passed\b|CORPUS_CHECK: PASS", out, re.I):  # "Test passed", "All tests passed"
        res.outcome = "pass"
        etype, emsg = last_exception(err)
        res.post_check_error = f"{etype}: {emsg}".strip(": ")
        res.detail = "reference check passed; failed afterwards (benchmark/profiling code)"
        return res
    res.returncode = rc
    return classify_failure(res, text, err if not is_pytest else text, nki, is_pytest, tmp)


def first_line_matching(text: str, pattern: str) -> str:
    for line in text.splitlines():
        if re.search(pattern, line):
            return line.strip()[:300]
    return ""


def classify_success(plan: Plan, res: Result, out: str, is_pytest: bool, nki: list[re.Match[str]]) -> Result:
    if is_pytest:
        if res.tests.get("passed", 0) == 0:
            res.outcome, res.detail = "no_entry", "no test passed (all skipped/deselected)"
        else:
            res.outcome, res.detail = "pass", f"{res.tests.get('passed', 0)} test(s) passed"
        return res
    fail = FAIL_MARKERS.search(out)
    if fail:
        res.outcome, res.detail = "mismatch", f"output says: {line_of(out, fail.start())}"
        return res
    if plan.check == "none" and not PASS_MARKERS.search(out):
        res.outcome, res.detail = "ran", "ran to completion; the file has no reference check"
        return res
    res.outcome, res.detail = "pass", "ran; reference check passed"
    return res


def line_of(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start: end if end >= 0 else len(text)].strip()[:200]


def classify_failure(
    res: Result, text: str, tb_text: str, nki: list[re.Match[str]], is_pytest: bool, tmp: Path
) -> Result:
    node, etype, emsg = pytest_failure(text) if is_pytest else ("", "", "")
    if not etype:
        etype, emsg = last_exception(tb_text)
    res.exception = f"{etype}: {emsg}"[:400] if etype else None
    site, where = innermost_frame(tb_text, tmp)
    if nki:
        m = nki[-1]
        code = m.group("code")
        res.nki_code, res.nki_message = code, m.group("msg").strip()[:400]
        res.nki_line = f"{m.group('path').replace(str(tmp) + '/', '')}:{m.group('line')}" if m.group("path") else None
        if code in UNSUPPORTED_CODES:
            res.outcome = "unsupported"
            res.missing_api = api_from_message(res.nki_message)
        elif code == "sim_timeout":
            res.outcome = "timeout"
        else:
            res.outcome = "sim_error"
            if code == "sim_python_exception":  # where did the wrapped Python exception come from?
                inner = tb_text.split("The above exception was the direct cause")[0]
                res.crash_site, where = innermost_frame(inner, tmp)
                res.detail_where = where
        res.detail = f"[{code}] {res.nki_message}"
        return res
    if etype.endswith(("ModuleNotFoundError", "ImportError")):
        mod = module_from_message(emsg)
        if is_nki_module(mod):
            res.outcome, res.missing_api = "unsupported", short_api(mod)
        else:
            res.outcome, res.missing_module = "import_error", mod.split(".")[0] if mod else emsg[:80]
        res.detail = f"{etype}: {emsg}"[:300]
        return res
    if etype.endswith("AttributeError"):
        m = re.search(r"module '([\w.]+)' has no attribute '(\w+)'", emsg)
        if m and is_nki_module(m.group(1)):
            res.outcome, res.missing_api = "unsupported", short_api(f"{m.group(1)}.{m.group(2)}")
            res.detail = f"{etype}: {emsg}"[:300]
            return res
    if etype.endswith("NotImplementedError"):
        res.outcome, res.missing_api = "unsupported", api_from_message(emsg) or emsg[:80]
        res.detail = f"{etype}: {emsg}"[:300]
        return res
    if etype.endswith("AssertionError") and assertion_is_check(tb_text):
        res.outcome, res.detail = "mismatch", f"{node + ': ' if node else ''}{etype}: {emsg}"[:300]
        return res
    if not etype and FAIL_MARKERS.search(text) and not is_pytest:
        res.outcome, res.detail = "mismatch", "output says: " + line_of(text, FAIL_MARKERS.search(text).start())
        return res
    res.outcome = "crash"
    res.crash_site = site or None
    res.detail = (f"{etype}: {emsg}" if etype else "non-zero exit " + str(res.returncode)) + (
        f" @ {where}" if where else "")
    res.detail = res.detail[:400]
    return res


def module_from_message(msg: str) -> str:
    m = re.search(r"No module named '([\w.]+)'", msg) or re.search(r"cannot import name '(\w+)' from '([\w.]+)'", msg)
    if not m:
        return ""
    if m.re.pattern.startswith("cannot"):
        return f"{m.group(2)}.{m.group(1)}"
    return m.group(1)


def api_from_message(msg: str | None) -> str | None:
    if not msg:
        return None
    m = re.search(r"\b((?:nl|nisa|ncc|nki|ncoll|neuronxcc\.nki|nki\.\w+)\.[\w.]+)", msg)
    if m:
        return short_api(m.group(1))
    m = re.search(r"'([\w.]+)'", msg)
    return short_api(m.group(1)) if m else msg[:60]


# --------------------------------------------------------------------------------------------------
# Aggregation and reporting
# --------------------------------------------------------------------------------------------------


def aggregate(results: list[Result]) -> dict[str, Any]:
    by_repo: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for r in results:
        by_repo[r.repo][r.outcome] += 1
    total = collections.Counter(r.outcome for r in results)
    missing = collections.Counter(r.missing_api for r in results if r.missing_api and r.outcome == "unsupported")
    probe_missing = collections.Counter(r.missing_api for r in results if r.missing_api and r.outcome == "no_entry")
    codes = collections.Counter(r.nki_code for r in results if r.nki_code)
    modules = collections.Counter(r.missing_module for r in results if r.missing_module)
    crashes = collections.Counter((r.exception or r.detail).split(":")[0] for r in results if r.outcome == "crash")
    return {
        "total": dict(total),
        "rows": len(results),
        "by_repo": {k: dict(v) for k, v in sorted(by_repo.items())},
        "top_missing_apis": missing.most_common(25),
        "top_missing_apis_in_import_probes": probe_missing.most_common(15),
        "top_error_codes": codes.most_common(25),
        "top_missing_modules": modules.most_common(15),
        "top_crash_exceptions": crashes.most_common(15),
    }


def markdown_table(summary: dict[str, Any]) -> str:
    cols = list(OUTCOMES)
    lines = ["| repo | " + " | ".join(cols) + " | total |", "|---|" + "---|" * (len(cols) + 1)]
    for repo, counts in summary["by_repo"].items():
        lines.append(f"| {repo} | " + " | ".join(str(counts.get(c, "")) for c in cols)
                     + f" | {sum(counts.values())} |")
    tot = summary["total"]
    lines.append("| **total** | " + " | ".join(f"**{tot.get(c, 0)}**" for c in cols) + f" | **{summary['rows']}** |")
    out = ["\n".join(lines)]
    for key, title in (("top_missing_apis", "Top missing APIs"), ("top_error_codes", "Top NKI error codes"),
                       ("top_missing_modules", "Top missing modules (import_error)"),
                       ("top_crash_exceptions", "Top crash exceptions"),
                       ("top_missing_apis_in_import_probes", "Missing APIs seen by no_entry import probes")):
        if summary[key]:
            out.append(f"\n**{title}:** " + ", ".join(f"`{k}` ×{n}" for k, n in summary[key]))
    return "\n".join(out)


def print_report(summary: dict[str, Any]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(markdown_table(summary))
        return
    table = Table(title="NKI corpus through the embedded simulator")
    table.add_column("repo")
    for c in (*OUTCOMES, "total"):
        table.add_column(c, justify="right")
    for repo, counts in summary["by_repo"].items():
        table.add_row(repo, *(str(counts.get(c, "")) for c in OUTCOMES), str(sum(counts.values())))
    table.add_row("total", *(str(summary["total"].get(c, 0)) for c in OUTCOMES), str(summary["rows"]), style="bold")
    console = Console(width=200)
    console.print(table)
    for key in ("top_missing_apis", "top_error_codes", "top_missing_modules", "top_crash_exceptions",
                "top_missing_apis_in_import_probes"):
        if summary[key]:
            console.print(f"[bold]{key}[/bold]: " + ", ".join(f"{k} ×{n}" for k, n in summary[key]))


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mirrors", type=Path, default=os.environ.get(MIRRORS_ENV),
                   help=f"directory of bare git mirrors (or env {MIRRORS_ENV})")
    p.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST, help="kernel-corpus.tsv")
    p.add_argument("--out", type=Path, default=Path("results.json"), help="results JSON path")
    p.add_argument("--markdown", type=Path, default=None, help="also write the summary as markdown")
    p.add_argument("--filter", default="", help="only rows whose repo (or repo:path) contains this substring")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per row")
    p.add_argument("--jobs", type=int, default=2, help="concurrent subprocesses (default 2)")
    p.add_argument("--python", default=sys.executable, help="interpreter that has nki_agent installed")
    p.add_argument("--keep", type=Path, default=None, help="copy each row's temp tree here (debugging)")
    p.add_argument("--merge", type=Path, default=None,
                   help="previous results JSON: keep its rows that this run does not re-run, write the union")
    p.add_argument("--plan-only", action="store_true", help="print the chosen entry per row; run nothing")
    args = p.parse_args(argv)
    if not args.mirrors:
        p.error(f"--mirrors DIR (or env {MIRRORS_ENV}) is required")
    return args


def select_rows(rows: list[Row], needle: str) -> list[Row]:
    if not needle:
        return rows
    return [r for r in rows if needle in r.repo or needle in f"{r.repo}:{r.path}"]


def check_mirrors(mirrors: Mirrors, rows: list[Row]) -> list[str]:
    """Problems with the mirrors (missing repo or commit) for the selected rows."""
    problems = []
    for repo, commit in sorted({(r.repo, r.commit) for r in rows}):
        if mirrors.git_dir(repo) is None:
            problems.append(f"missing mirror: {repo}")
        elif not mirrors.has_commit(repo, commit):
            problems.append(f"missing commit: {repo}@{commit}")
    return problems


def run_all(mirrors: Mirrors, rows: list[Row], args: argparse.Namespace) -> list[Result]:
    results: list[Result] = []
    usable = {(r.repo, r.commit) for r in rows if mirrors.git_dir(r.repo) and mirrors.has_commit(r.repo, r.commit)}
    todo = []
    for row in rows:
        if (row.repo, row.commit) not in usable:
            results.append(base_result(row, Plan(entry_kind="none"), "no_entry", detail="mirror/commit unavailable"))
        else:
            todo.append(row)
    done = 0
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futs = {pool.submit(run_row, mirrors, row, args.python, args.timeout, args.keep): row for row in todo}
        for fut in as_completed(futs):
            row = futs[fut]
            try:
                res = fut.result()
            except Exception as exc:  # never lose the whole run to one row
                res = base_result(row, Plan(entry_kind="none"), "crash", detail=f"harness error: {exc!r}")
                res.crash_site = "harness"
            results.append(res)
            done += 1
            print(f"[{done}/{len(todo)}] {res.outcome:12s} {res.seconds:6.1f}s {row.key}  {res.detail[:110]}",
                  file=sys.stderr, flush=True)
    order = {r.key: i for i, r in enumerate(rows)}
    results.sort(key=lambda r: order.get(f"{r.repo}@{r.commit[:8]}:{r.path}", 0))
    return results


def merge_results(previous: Path, fresh: list[Result], manifest: list[Row]) -> list[Result]:
    """Previous results with the freshly re-run rows replaced, in manifest order."""
    by_key = {f"{r['repo']}@{r['commit'][:8]}:{r['path']}": Result(**r)
              for r in json.loads(previous.read_text())["results"]}
    by_key.update({f"{r.repo}@{r.commit[:8]}:{r.path}": r for r in fresh})
    return [by_key[row.key] for row in manifest if row.key in by_key]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows = select_rows(read_manifest(args.manifest), args.filter)
    for r in read_manifest(args.manifest):
        _COMMITS.setdefault(r.repo, r.commit)
    mirrors = Mirrors(args.mirrors)
    for problem in check_mirrors(mirrors, rows):
        print("warning:", problem, file=sys.stderr)
    if args.plan_only:
        for row in rows:
            plan = plan_row(mirrors, row) if mirrors.git_dir(row.repo) else Plan(entry_kind="none")
            print(f"{plan.entry_kind:16s} {plan.check:16s} {row.key} -> {plan.entry or plan.reason} "
                  f"[{len(plan.files)} files, path={plan.pythonpath}]")
        return 0
    results = run_all(mirrors, rows, args)
    if args.merge:
        results = merge_results(args.merge, results, read_manifest(args.manifest))
    summary = aggregate(results)
    payload = {"manifest": str(args.manifest), "timeout": args.timeout, "summary": summary,
               "results": [asdict(r) for r in results]}
    args.out.write_text(json.dumps(payload, indent=2))
    if args.markdown:
        args.markdown.write_text(markdown_table(summary) + "\n")
    print_report(summary)
    print(f"\nwrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
