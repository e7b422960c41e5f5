"""Every error the simulator claims to raise has a broken-kernel fixture; the id and the line must match.

A fixture file is both the kernel and its task; the offending line carries ``# expect: <code>``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nki_agent.toolchain.facts.errors import DOCUMENTED, SIMULATOR
from nki_agent.toolchain.judging.verify import verify_files

BROKEN = Path(__file__).resolve().parents[1] / "fixtures" / "broken"
EXPECT = re.compile(r"#\s*expect:\s*([a-z0-9_]+)")

# Codes that need the sandbox (time, memory) or a real crash are covered in test_sandbox.py;
# sim_runner_disagrees compares two verifications (tests/server/test_runner_disagreement.py).
NOT_A_KERNEL_ERROR = {"sim_timeout", "sim_memory_limit", "sim_worker_crash", "sim_bad_input", "sim_task_error",
                      "sim_unsupported_api", "sim_uninitialized_read", "sim_invalid_argument", "sim_wrong_result", "sim_cancelled",
                      "sim_sandbox_violation", "sim_runner_disagrees", "sim_task_not_found"} | {  # task_not_found: tests/server
                          c for c in SIMULATOR if c.startswith("runner_")}  # the device backend's (tests/runner)


def expectation(path: Path) -> tuple[str, int]:
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        m = EXPECT.search(line)
        if m:
            return m.group(1), lineno
    raise AssertionError(f"{path.name} has no '# expect:' marker")


CASES = sorted(BROKEN.glob("*.py"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_broken_kernel_reports_code_at_line(path: Path) -> None:
    code, line = expectation(path)
    res = verify_files(str(path), str(path), seeds=1)
    assert not res.correct
    assert res.problems, f"no problem reported for {path.name}"
    first = res.problems[0]
    assert first.code == code, f"{path.name}: got {first.code}: {first.message}"
    assert first.location is not None
    assert first.location.line == line, f"{path.name}: {first.code} at line {first.location.line}, expected {line}"
    assert first.location.path.endswith(path.name)
    assert first.doc_url.startswith("https://")


def test_every_claimed_error_has_a_fixture() -> None:
    covered = {expectation(p)[0] for p in CASES}
    claimed = set(DOCUMENTED) | set(SIMULATOR)
    missing = claimed - covered - NOT_A_KERNEL_ERROR - UNRAISED
    assert not missing, f"errors without a broken-kernel fixture: {sorted(missing)}"


# Documented ids the simulator lists for explanation but does not raise (no fixture expected).
UNRAISED = {"err_leading_dimension_of_tensor_must_be_partition",
            "err_mutable_parameter_not_returned",
            "err_while_loop_requires_unconditional_entry"}


def test_sbuf_pressure_is_a_warning_not_a_failure() -> None:
    path = BROKEN.parent / "warn_sbuf_pressure.py"
    res = verify_files(str(path), str(path), seeds=1)
    assert res.correct, res.problems
    warn = [p for p in res.problems if p.code == "err_stack_overflow_sbuf"]
    assert len(warn) == 1 and warn[0].severity == "warning"
    lines = path.read_text().splitlines()
    assert warn[0].location is not None and "newest tile" in lines[warn[0].location.line - 1]
    assert res.peak_sbuf_bytes >= 8 * 128 * 16384 * 4
