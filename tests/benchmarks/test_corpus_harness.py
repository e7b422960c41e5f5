"""The corpus harness (``benchmarks/corpus/``): manifest parsing, import closure, outcome
classification, and one end-to-end run against a tiny bare git mirror built in ``tmp_path``.

Pure and offline: no real corpus, no network. The harness folder is not a package; its modules import
each other by bare name, so the folder goes on ``sys.path`` here (as it is when the script runs).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CORPUS_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus"
RUN_CORPUS = CORPUS_DIR / "run_corpus.py"
if str(CORPUS_DIR) not in sys.path:
    sys.path.insert(0, str(CORPUS_DIR))

import closure
from classify import classify
from closure import import_closure, resolve_import
from manifest import Mirrors, Plan, read_manifest

HEADER = ("repo\tcommit\tpath\tapi\tkernel_functions\tops\thas_reference_test\tdifficulty\tlines\t"
          "subkernels\tref_kind\tframework_ref\tself_contained\tlocal_deps\torigin\tnotes\talso_at\tlocal_copy")


def manifest_line(repo: str, commit: str, path: str, *, api: str = "classic", kernels: str = "add_kernel",
                  refs: str = "(self)", notes: str = "") -> str:
    """One TSV row with the real manifest's columns (the harness ignores the extra ones)."""
    cols = {"repo": repo, "commit": commit, "path": path, "api": api, "kernel_functions": kernels,
            "ops": "nl.load,nl.add,nl.store", "has_reference_test": refs, "difficulty": "1", "lines": "30",
            "subkernels": "", "ref_kind": "numpy", "framework_ref": "", "self_contained": "yes",
            "local_deps": "", "origin": "test", "notes": notes, "also_at": "", "local_copy": ""}
    return "\t".join(cols[name] for name in HEADER.split("\t"))


# --------------------------------------------------------------------------------------------------
# Manifest
# --------------------------------------------------------------------------------------------------


def test_read_manifest_parses_rows_and_keys(tmp_path: Path) -> None:
    tsv = tmp_path / "corpus.tsv"
    tsv.write_text("\n".join([
        HEADER,
        manifest_line("acme/kernels", "a" * 40, "kernels/add.py"),
        manifest_line("acme/kernels", "b" * 40, "src/helper.py", api="new",
                      kernels="(none: sub-kernel module)", refs="tests/test_helper.py;other/repo:tests/t.py",
                      notes="assignment stub"),
    ]) + "\n")
    rows = read_manifest(tsv)
    assert len(rows) == 2
    first, second = rows
    assert (first.repo, first.commit, first.path) == ("acme/kernels", "a" * 40, "kernels/add.py")
    assert (first.api, first.has_reference_test, first.self_contained, first.ref_kind) == (
        "classic", "(self)", "yes", "numpy")
    assert first.key == "acme/kernels@aaaaaaaa:kernels/add.py"
    assert second.kernel_functions == "(none: sub-kernel module)"
    assert second.has_reference_test == "tests/test_helper.py;other/repo:tests/t.py"
    assert second.notes == "assignment stub" and second.api == "new"


def test_read_manifest_tolerates_missing_optional_columns(tmp_path: Path) -> None:
    tsv = tmp_path / "minimal.tsv"
    tsv.write_text("repo\tcommit\tpath\nacme/k\tc0ffee\tk.py\n")
    (row,) = read_manifest(tsv)
    assert (row.repo, row.commit, row.path) == ("acme/k", "c0ffee", "k.py")
    assert row.api == row.notes == row.has_reference_test == ""


# --------------------------------------------------------------------------------------------------
# Import closure
# --------------------------------------------------------------------------------------------------


class DirMirrors:
    """The two ``Mirrors`` methods the closure uses, over a plain directory (one repo, one commit)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._tree = frozenset(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())

    def tree(self, repo: str, commit: str) -> frozenset[str]:
        return self._tree

    def text(self, repo: str, commit: str, path: str) -> str:
        return (self.root / path).read_text()


def write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        out = root / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(textwrap.dedent(text))


@pytest.fixture(autouse=True)
def fresh_root_cache():
    """The closure caches sys.path roots by ``id(tree)``; fake trees come and go, so start clean."""
    closure._ROOT_CACHE.clear()
    yield
    closure._ROOT_CACHE.clear()


FAKE_REPO = {
    "pkg/__init__.py": "",
    "pkg/consts.py": "N = 128\n",
    "pkg/kernels/__init__.py": "",
    "pkg/kernels/add.py": """
        import numpy as np
        import neuronxcc.nki.language as nl
        from . import helpers
        from ..util import tiles
        from .nothing_here import ghost          # missing relative module
        import missing_mod                       # missing absolute module
        from pkg.consts import N
        from nkilib.core import rmsnorm          # lives in another mirrored repo
    """,
    "pkg/kernels/helpers.py": "def helper():\n    from pkg.consts import N\n    return N\n",
    "pkg/util/__init__.py": "",
    "pkg/util/tiles.py": "TILE = 128\n",
    "pkg/unused.py": "import pkg.consts\n",
    "tests/test_add.py": "from pkg.kernels.add import helpers\n\ndef test_add():\n    assert helpers\n",
    "src/lib/ops.py": "def f():\n    return 1\n",  # namespace package under a non-ancestor root
    "scripts/run.py": "from lib.ops import f\nimport lib.ops\n",
    "broken.py": "from pkg import consts\ndef oops(:\n",  # SyntaxError: imports found by regex
}


def test_import_closure_follows_relative_absolute_and_package_inits(tmp_path: Path) -> None:
    write_tree(tmp_path, FAKE_REPO)
    files, roots, cross = import_closure(DirMirrors(tmp_path), "acme/kernels", "c0", ["tests/test_add.py"])
    assert files == {
        "tests/test_add.py", "pkg/__init__.py", "pkg/kernels/__init__.py", "pkg/kernels/add.py",
        "pkg/kernels/helpers.py", "pkg/util/__init__.py", "pkg/util/tiles.py", "pkg/consts.py",
    }
    assert roots == {""}  # `pkg` resolves from the repo root (an ancestor of tests/)
    assert cross == {"nkilib"}  # unresolved here, but known to live in nki-library


def test_import_closure_skips_missing_seeds_and_uses_other_roots(tmp_path: Path) -> None:
    write_tree(tmp_path, FAKE_REPO)
    files, roots, cross = import_closure(DirMirrors(tmp_path), "acme/kernels", "c0",
                                         ["scripts/run.py", "does/not/exist.py"])
    assert files == {"scripts/run.py", "src/lib/ops.py"}
    assert roots == {"src"} and cross == set()


def test_import_closure_of_unparsable_file_falls_back_to_regex(tmp_path: Path) -> None:
    write_tree(tmp_path, FAKE_REPO)
    files, _, _ = import_closure(DirMirrors(tmp_path), "acme/kernels", "c0", ["broken.py"])
    assert files == {"broken.py", "pkg/__init__.py"}


def test_resolve_import_cases(tmp_path: Path) -> None:
    write_tree(tmp_path, FAKE_REPO)
    tree = DirMirrors(tmp_path).tree("acme/kernels", "c0")
    importer = "pkg/kernels/add.py"
    assert resolve_import(tree, importer, 1, "", ["helpers"]) == [("pkg/kernels/helpers.py", "")]
    assert resolve_import(tree, importer, 2, "util", ["tiles"]) == [("pkg/util/__init__.py", ""),
                                                                    ("pkg/util/tiles.py", "")]
    assert resolve_import(tree, importer, 1, "nothing_here", ["ghost"]) == []
    assert resolve_import(tree, importer, 0, "missing_mod", []) == []
    assert resolve_import(tree, importer, 0, "numpy", []) == []  # external: never resolved in the repo
    # longest module prefix wins; the rest are attributes
    assert resolve_import(tree, importer, 0, "pkg.consts.N", []) == [("pkg/consts.py", "")]


# --------------------------------------------------------------------------------------------------
# Classification of recorded outputs
# --------------------------------------------------------------------------------------------------

TMP = Path("/tmp/nki-corpus-test")  # the temp tree the recorded outputs were "run" in
SCRIPT = Plan(entry_kind="script", entry="kernels/add.py", check="self", command=["kernels/add.py"])
NO_CHECK = Plan(entry_kind="script", entry="docs/snippet.py", check="none", command=["docs/snippet.py"])
PYTEST = Plan(entry_kind="pytest", entry="tests/test_add.py", check="test",
              command=["-m", "pytest", "tests/test_add.py", "-x", "-q", "-p", "_corpus_plugin"])


def traceback(*frames: tuple[str, int, str], last: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line, fn in frames:
        lines += [f'  File "{path}", line {line}, in {fn}', "    ..."]
    return "\n".join([*lines, last]) + "\n"


def test_classify_pass_markers() -> None:
    res = classify(SCRIPT, 0, "max abs diff 0.0\nCORPUS_CHECK: PASS\n", "", False, TMP)
    assert res.outcome == "pass" and res.detail == "ran; reference check passed"


def test_classify_pass_then_failing_benchmark_is_still_pass() -> None:
    out = "Checking correctness of add_kernel\nAll tests passed\nBenchmarking add_kernel...\n"
    err = traceback((f"{TMP}/kernels/add.py", 40, "<module>"),
                    ("/usr/lib/python3/site-packages/nki/benchmark.py", 9, "run"),
                    last="RuntimeError: benchmarking needs a Neuron device")
    res = classify(SCRIPT, 1, out, err, False, TMP)
    assert res.outcome == "pass"
    assert res.post_check_error == "RuntimeError: benchmarking needs a Neuron device"
    assert "failed afterwards" in res.detail


def test_classify_script_without_check_just_ran() -> None:
    assert classify(NO_CHECK, 0, "[[1. 2.]\n [3. 4.]]\n", "", False, TMP).outcome == "ran"
    assert classify(NO_CHECK, 0, "outputs match\n", "", False, TMP).outcome == "pass"


@pytest.mark.parametrize(("rc", "out", "err"), [
    (0, "output 0: rel l2 error 3.1e-01\nResults differ from the reference!\n", ""),
    (3, "output 0: rel l2 error 3.1e-01\nCORPUS_CHECK: MISMATCH\n", ""),
    (1, "", (f'Traceback (most recent call last):\n  File "{TMP}/kernels/add.py", line 30, in <module>\n'
             "    np.testing.assert_allclose(out, expected)\n"
             "AssertionError: \nNot equal to tolerance rtol=1e-07, atol=0\n\n"
             "Mismatched elements: 7 / 65536\n")),
])
def test_classify_mismatch(rc: int, out: str, err: str) -> None:
    res = classify(SCRIPT, rc, out, err, False, TMP)
    assert res.outcome == "mismatch", res


def test_classify_nki_error_with_code_and_line() -> None:
    err = traceback((f"{TMP}/kernels/add.py", 22, "<module>"),
                    ("/repo/toolchain/sim/kernel.py", 156, "launch"),
                    (f"{TMP}/kernels/add.py", 13, "add_kernel"),
                    ("/repo/toolchain/sim/tensor.py", 91, "allocate"),
                    last=f"nki_agent.toolchain.facts.errors.NkiError: {TMP}/kernels/add.py:13: "
                         "[err_num_partition_exceed_arch_limit] number of partitions 256 of tensor 'a_tile' "
                         "[256, 512] exceed architecture limitation of 128.")
    res = classify(SCRIPT, 1, "", err, False, TMP)
    assert res.outcome == "sim_error"
    assert res.nki_code == "err_num_partition_exceed_arch_limit"
    assert res.nki_line == "kernels/add.py:13"
    assert res.nki_message.startswith("number of partitions 256")
    assert res.detail.startswith("[err_num_partition_exceed_arch_limit]")


def test_classify_sim_codes_unsupported_timeout_and_python_exception() -> None:
    unsupported = classify(SCRIPT, 1, "", "NkiError: k.py:5: [sim_unsupported_api] nisa.dma_transpose is not "
                                          "modelled by the simulator\n", False, TMP)
    assert (unsupported.outcome, unsupported.missing_api) == ("unsupported", "nisa.dma_transpose")
    sim_timeout = classify(SCRIPT, 1, "", "NkiError: [sim_timeout] kernel ran longer than 30 s\n", False, TMP)
    assert sim_timeout.outcome == "timeout" and sim_timeout.nki_code == "sim_timeout"
    inner = traceback((f"{TMP}/kernels/add.py", 9, "add_kernel"), last="ZeroDivisionError: division by zero")
    cause = "\nThe above exception was the direct cause of the following exception:\n\n"
    wrapped = inner + cause + traceback(
        ("/repo/toolchain/sim/kernel.py", 160, "launch"),
        last="NkiError: kernels/add.py:9: [sim_python_exception] ZeroDivisionError: division by zero")
    crashed = classify(SCRIPT, 1, "", wrapped, False, TMP)
    assert crashed.outcome == "sim_error" and crashed.nki_code == "sim_python_exception"
    assert crashed.crash_site == "corpus" and crashed.detail_where == "kernels/add.py:9 in add_kernel"


def test_classify_import_errors() -> None:
    err = traceback((f"{TMP}/kernels/add.py", 3, "<module>"),
                    last="ModuleNotFoundError: No module named 'torch_xla'")
    res = classify(SCRIPT, 1, "", err, False, TMP)
    assert (res.outcome, res.missing_module) == ("import_error", "torch_xla")
    err = traceback((f"{TMP}/kernels/add.py", 3, "<module>"),
                    last="ModuleNotFoundError: No module named 'neuronxcc.nki._private_kernels'")
    res = classify(SCRIPT, 1, "", err, False, TMP)
    assert (res.outcome, res.missing_api) == ("unsupported", "nki._private_kernels")
    err = traceback((f"{TMP}/kernels/add.py", 3, "<module>"),
                    last="AttributeError: module 'neuronxcc.nki.isa' has no attribute 'dma_engine'")
    res = classify(SCRIPT, 1, "", err, False, TMP)
    assert (res.outcome, res.missing_api) == ("unsupported", "nisa.dma_engine")


def test_classify_crash_in_driver() -> None:
    err = traceback((f"{TMP}/kernels/add.py", 31, "<module>"), (f"{TMP}/kernels/add.py", 12, "make_inputs"),
                    last="TypeError: unsupported operand type(s) for +: 'int' and 'str'")
    res = classify(SCRIPT, 1, "", err, False, TMP)
    assert res.outcome == "crash" and res.crash_site == "corpus"
    assert res.exception == "TypeError: unsupported operand type(s) for +: 'int' and 'str'"
    assert res.detail.endswith("@ kernels/add.py:12 in make_inputs")
    sim = classify(SCRIPT, 1, "", traceback((f"{TMP}/kernels/add.py", 31, "<module>"),
                                            ("/repo/nki_agent/toolchain/sim/ops/memory.py", 94, "load"),
                                            last="KeyError: 'shape'"), False, TMP)
    assert sim.outcome == "crash" and sim.crash_site == "simulator"


def test_classify_timeout() -> None:
    res = classify(SCRIPT, None, "partial output\n", "", True, TMP)
    assert (res.outcome, res.detail) == ("timeout", "subprocess timed out")


def test_classify_pytest_summaries() -> None:
    ok = classify(PYTEST, 0, "...s\n3 passed, 1 skipped in 2.10s\n", "", False, TMP)
    assert ok.outcome == "pass" and ok.tests == {"passed": 3, "skipped": 1}
    assert ok.detail == "3 test(s) passed"

    failed_out = textwrap.dedent("""\
        .F
        =================================== FAILURES ===================================
        _________________________________ test_add[128] ________________________________
        tests/test_add.py:21: in test_add
            np.testing.assert_allclose(out, expected, rtol=1e-3)
        E   AssertionError:
        E   Not equal to tolerance rtol=0.001, atol=0
        =========================== short test summary info ============================
        FAILED tests/test_add.py::test_add[128] - AssertionError:
        !!!!!!!!!!!!!!!!!!!!!!!!!! stopping after 1 failures !!!!!!!!!!!!!!!!!!!!!!!!!!!
        1 failed, 1 passed in 3.02s
    """)
    bad = classify(PYTEST, 1, failed_out, "", False, TMP)
    assert bad.outcome == "mismatch" and bad.tests == {"failed": 1, "passed": 1}
    assert bad.detail.startswith("tests/test_add.py::test_add[128]: AssertionError")

    none_passed = classify(PYTEST, 0, "sss\n3 skipped in 0.20s\n", "", False, TMP)
    assert none_passed.outcome == "no_entry"
    nothing = classify(PYTEST, 5, "\n4 deselected in 0.11s\n", "", False, TMP)
    assert nothing.outcome == "no_entry" and nothing.tests == {"deselected": 4}
    usage = classify(PYTEST, 4, "", "ERROR: usage: pytest [options]\npytest: error: unrecognized arguments: "
                                    "--simulation-only\n", False, TMP)
    assert usage.outcome == "crash" and usage.crash_site == "harness"
    assert "unrecognized arguments" in usage.detail


# --------------------------------------------------------------------------------------------------
# End to end: a bare mirror in tmp_path, the real CLI in a subprocess
# --------------------------------------------------------------------------------------------------

ADD_KERNEL = '''\
"""A 128x512 element-wise add, checked against NumPy."""
import numpy as np

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

ROWS = 128


@nki.jit
def add_kernel(a_input, b_input):
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    a_tile = nl.load(a_input[0:ROWS, 0:512])
    b_tile = nl.load(b_input[0:ROWS, 0:512])
    nl.store(c_output[0:ROWS, 0:512], value=nl.add(a_tile, b_tile))
    return c_output


if __name__ == "__main__":
    a = np.random.rand(ROWS, 512).astype(np.float32)
    b = np.random.rand(ROWS, 512).astype(np.float32)
    out = add_kernel(a, b)
    if np.allclose(out, a + b):
        print("CORPUS_CHECK: PASS")
    else:
        print("CORPUS_CHECK: MISMATCH")
'''


def git(*args: str, cwd: Path | None = None) -> str:
    cmd = ["git", "-c", "user.name=corpus-test", "-c", "user.email=corpus-test@example.invalid",
           "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", *args]
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def make_mirror(mirrors: Path, work: Path, files: dict[str, str]) -> str:
    """A bare mirror at ``mirrors/acme+kernels`` with one commit of ``files``; returns the commit."""
    bare = mirrors / "acme+kernels"
    git("init", "--bare", "-q", str(bare))
    write_tree(work, files)
    git(f"--git-dir={bare}", f"--work-tree={work}", "add", "-A")
    git(f"--git-dir={bare}", f"--work-tree={work}", "commit", "-q", "-m", "kernels")
    return git(f"--git-dir={bare}", "rev-parse", "HEAD")


@pytest.mark.slow
def test_run_corpus_end_to_end(tmp_path: Path) -> None:
    commit = make_mirror(tmp_path / "mirrors", tmp_path / "work", {
        "kernels/add.py": ADD_KERNEL,
        "kernels/add_broken.py": ADD_KERNEL.replace("ROWS = 128", "ROWS = 256"),  # 256 partitions
    })
    mirrors = Mirrors(tmp_path / "mirrors")
    assert mirrors.git_dir("acme/kernels") == tmp_path / "mirrors" / "acme+kernels"
    assert mirrors.has_commit("acme/kernels", commit) and not mirrors.has_commit("acme/kernels", "0" * 40)
    assert mirrors.tree("acme/kernels", commit) == {"kernels/add.py", "kernels/add_broken.py"}

    manifest = tmp_path / "corpus.tsv"
    manifest.write_text("\n".join([HEADER, manifest_line("acme/kernels", commit, "kernels/add.py"),
                                   manifest_line("acme/kernels", commit, "kernels/add_broken.py")]) + "\n")
    out, md = tmp_path / "results.json", tmp_path / "summary.md"
    proc = subprocess.run(
        [sys.executable, str(RUN_CORPUS), "--mirrors", str(tmp_path / "mirrors"), "--manifest", str(manifest),
         "--out", str(out), "--markdown", str(md), "--jobs", "1", "--timeout", "60"],
        cwd=tmp_path, check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(out.read_text())
    good, broken = payload["results"]

    assert (good["path"], good["entry_kind"], good["check"]) == ("kernels/add.py", "script", "self")
    assert good["outcome"] == "pass", good
    assert good["command"] == "python -m nki_agent.toolchain.shim kernels/add.py"

    assert broken["path"] == "kernels/add_broken.py"
    assert broken["outcome"] == "sim_error", broken
    assert broken["nki_code"] == "err_num_partition_exceed_arch_limit"
    assert broken["nki_line"] == "kernels/add_broken.py:13"

    summary = payload["summary"]
    assert summary["rows"] == 2 and summary["total"] == {"pass": 1, "sim_error": 1}
    assert summary["top_error_codes"] == [["err_num_partition_exceed_arch_limit", 1]]
    assert "| acme/kernels | 1 |" in md.read_text()
