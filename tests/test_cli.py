"""The ``nki-agent`` command line, run as a real subprocess on examples/ and tests/fixtures/broken/.

Exit codes: 0 clean/correct, 1 errors/incorrect, 2 usage error. ``--json`` diagnostics carry code,
severity, message, path, 1-based line/column (+ end_line, end_column), source and doc_url.
Each subprocess costs ~1-2 s, so the cases are few and chosen to cover distinct paths.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
BROKEN = ROOT / "tests" / "fixtures" / "broken"
EXPECT = re.compile(r"#\s*expect:\s*([a-z0-9_]+)")
DIAG_FIELDS = {"code": str, "severity": str, "message": str, "path": str, "line": int, "column": int,
               "end_line": int, "end_column": int, "source": str, "doc_url": str}


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nki_agent", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False)


def as_json(proc: subprocess.CompletedProcess[str]) -> Any:
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON on stdout (rc={proc.returncode}):\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")


def expectation(path: Path) -> tuple[str, int]:
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        m = EXPECT.search(line)
        if m:
            return m.group(1), lineno
    raise AssertionError(f"{path.name} has no '# expect:' marker")


def check_diagnostic(d: dict[str, Any]) -> None:
    for key, typ in DIAG_FIELDS.items():
        assert key in d, f"diagnostic lacks {key!r}: {d}"
        assert isinstance(d[key], typ), f"{key}={d[key]!r} is not {typ.__name__}"
    assert d["severity"] in ("error", "warning", "information", "hint")
    assert d["line"] >= 1 and d["column"] >= 1
    assert (d["end_line"], d["end_column"]) >= (d["line"], d["column"])
    assert d["message"]
    assert d["doc_url"].startswith("https://")


# ------------------------------------------------------------------------------------------ verify
@pytest.mark.parametrize("example, kernel, generation, default_target", [
    ("l2_matmul", "kernel_classic.py", "classic", "trn1"),
    ("l1_add", "kernel_new.py", "new", "trn3"),
])
def test_verify_example_json(example: str, kernel: str, generation: str, default_target: str) -> None:
    proc = cli("verify", f"examples/{example}/{kernel}", "--task", f"examples/{example}/task.py", "--seeds", "2",
               "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = as_json(proc)
    assert res["compiled"] is True
    assert res["correct"] is True
    assert res["generation"] == generation
    assert res["target"] == default_target
    assert isinstance(res["max_abs_error"], float) and 0.0 <= res["max_abs_error"] <= res["atol"] + 1e-3
    assert res["mismatches"] == 0
    assert [s["seed"] for s in res["seeds"]] == [0, 1]
    for s in res["seeds"]:
        assert s["correct"] is True and s["mismatches"] == 0 and s["elements"] > 0
        assert s["max_abs_error"] <= res["max_abs_error"]
    assert res["diagnostics"] == []


def test_verify_target_is_reflected_in_json() -> None:
    proc = cli("verify", "examples/l1_row_sum/kernel_classic.py", "--task", "examples/l1_row_sum/task.py",
               "--seeds", "1", "--target", "trn2", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = as_json(proc)
    assert res["target"] == "trn2"
    assert res["correct"] is True and len(res["seeds"]) == 1


# One fixture per kind of failure: classic ISA check, new-API target limit, immutable input, memory
# model, Python exception in a helper, a whole-file problem (no kernel).
BROKEN_CASES = ["partition_mismatch", "matmul_bf16_dst_trn1",
                "python_exception_helper", "no_kernel"]


@pytest.mark.parametrize("name", BROKEN_CASES)
def test_verify_broken_fixture_reports_code_at_line(name: str) -> None:
    path = BROKEN / f"{name}.py"
    code, line = expectation(path)
    rel = f"tests/fixtures/broken/{name}.py"
    proc = cli("verify", rel, "--task", rel, "--seeds", "1", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    res = as_json(proc)
    assert res["correct"] is False
    assert res["diagnostics"], res
    for d in res["diagnostics"]:
        check_diagnostic(d)
    first = res["diagnostics"][0]
    assert first["code"] == code, first
    assert first["severity"] == "error"
    assert first["line"] == line, first
    assert first["path"].endswith(f"{name}.py")


def test_verify_incorrect_kernel_exit_1(tmp_path: Path) -> None:
    """A kernel that runs but computes the wrong thing (a - b for a + b): compiled, not correct, exit 1."""
    shutil.copy(EXAMPLES / "l1_add" / "task.py", tmp_path / "task.py")
    src = (EXAMPLES / "l1_add" / "kernel_classic.py").read_text()
    assert src.count("nl.add(") == 1, "l1_add classic kernel changed; update this test"
    kernel = tmp_path / "kernel_wrong.py"
    kernel.write_text(src.replace("nl.add(", "nl.subtract("))
    proc = cli("verify", str(kernel), "--task", str(tmp_path / "task.py"), "--seeds", "1", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    res = as_json(proc)
    assert res["compiled"] is True
    assert res["correct"] is False
    assert res["max_abs_error"] > 0.1 and res["mismatches"] > 0
    assert res["seeds"][0]["correct"] is False
    assert res["seeds"][0]["first_mismatch"] is not None


# ---------------------------------------------------------------------------------------- simulate
def test_simulate_json() -> None:
    proc = cli("simulate", "examples/l2_matmul/kernel_new.py", "--task", "examples/l2_matmul/task.py", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = as_json(proc)
    assert res["ran"] is True
    assert res["target"] == "trn3" and res["generation"] == "new"
    assert len(res["outputs"]) == 1
    out = res["outputs"][0]
    import runpy

    task = runpy.run_path(str(EXAMPLES / "l2_matmul" / "task.py"))
    expected = task["reference"](*task["get_inputs"]()).shape
    assert out["shape"] == list(expected) and out["dtype"] == "float32" and out["nan"] == 0
    assert res["instructions"] > 0 and res["trace"]


def test_simulate_broken_fixture_exit_1() -> None:
    rel = "tests/fixtures/broken/partition_exceed.py"
    code, line = expectation(ROOT / rel)
    proc = cli("simulate", rel, "--task", rel, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    res = as_json(proc)
    diags = res["diagnostics"]
    assert diags and diags[0]["code"] == code and diags[0]["line"] == line
    for d in diags:
        check_diagnostic(d)


# ------------------------------------------------------------------------------------------- check
def test_check_kernel_file_json() -> None:
    proc = cli("check", "examples/l2_matmul/kernel_classic.py", "examples/l2_matmul/kernel_new.py", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = as_json(proc)
    assert isinstance(res["diagnostics"], list)
    for d in res["diagnostics"]:
        check_diagnostic(d)
    assert not [d for d in res["diagnostics"] if d["severity"] == "error"], res["diagnostics"]


def test_check_syntax_error_fixture() -> None:
    rel = "tests/fixtures/broken/syntax_error.py"
    code, line = expectation(ROOT / rel)
    proc = cli("check", rel, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    res = as_json(proc)
    assert len(res["diagnostics"]) == 1
    d = res["diagnostics"][0]
    check_diagnostic(d)
    assert d["code"] == code and d["line"] == line and d["severity"] == "error"
    assert d["path"].endswith("syntax_error.py")


# -------------------------------------------------------------------------------------- usage errors
@pytest.mark.parametrize("args", [
    ("verify", "examples/l1_add/kernel_classic.py", "--json"),  # missing --task
    ("simulate",),  # missing kernel (without --task it is found, or the file runs without one)
    ("verify", "examples/l1_add/kernel_classic.py", "--task", "examples/l1_add/task.py", "--target", "trn9"),
    ("frobnicate",),  # unknown command
], ids=["verify_missing_task", "simulate_missing_kernel", "bad_target", "unknown_command"])
def test_usage_errors_exit_2(args: tuple[str, ...]) -> None:
    proc = cli(*args)
    assert proc.returncode == 2, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert proc.stderr.strip(), "a usage error should explain itself on stderr"


# -------------------------------------------------------------------------------------------- demo
def test_demo_on_one_copied_example(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "l1_transpose", tmp_path / "l1_transpose", ignore=shutil.ignore_patterns("__pycache__"))
    proc = cli("demo", "--examples", str(tmp_path), "--seeds", "1", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = as_json(proc)
    n_kernels = len(list((tmp_path / "l1_transpose").glob("kernel_*.py")))
    assert res["total"] == n_kernels >= 1
    assert res["correct"] == n_kernels
    assert {r["example"] for r in res["examples"]} == {"l1_transpose"}
    assert all(r["compiled"] and r["correct"] for r in res["examples"])


def test_demo_text_output(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "l1_add", tmp_path / "l1_add", ignore=shutil.ignore_patterns("__pycache__"))
    proc = cli("demo", "--examples", str(tmp_path), "--seeds", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "l1_add" in proc.stdout
    assert "verified correct" in proc.stdout
