"""Entry planning: for one manifest row, which entry to run, how, and which files it needs.

Owns the choice among autocomp harness / NKIBench driver / pytest / script / import probe
(``plan_row``), the extraction list (the import closure of the entry, cross-repo packages such as
``nkilib``), and the helper files the harness generates into the temp tree (pytest plugin, NKIBench
driver, import probe) — our code, not corpus code.
"""

from __future__ import annotations

import ast
import re
from pathlib import PurePosixPath

from closure import (
    CROSS_REPO_PACKAGES,
    import_closure,
    join,
    package_inits,
    pytest_support_files,
    sibling_data_files,
)
from manifest import Mirrors, Plan, Row

# pytest arguments that select the simulation-capable tests, used when an extracted conftest.py
# defines the option (nki-samples test/unit: --simulation-only; nki-library: --test-mode).
PYTEST_EXTRA_ARGS: dict[str, list[str]] = {
    "--simulation-only": ["--simulation-only", "-m", "simulation"],
    "--test-mode": ["--test-mode", "simulation", "-m", "fast"],
}

# A __main__ block mentioning one of these checks something (script check="self", not "none").
CHECK_HINT = re.compile(r"allclose|assert|array_equal|testing\.|isclose|differ|match", re.IGNORECASE)


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


# First commit seen per repo in the manifest: the commit of a cross-repo NKIBench reference module.
_COMMITS: dict[str, str] = {}


def note_commits(rows: list[Row]) -> None:
    """Remember the manifest commit of every repo (for references that name only ``repo:path``)."""
    for r in rows:
        _COMMITS.setdefault(r.repo, r.commit)


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
