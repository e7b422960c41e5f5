"""``nki-agent simulate`` on a kernel with no task whose ``__main__`` driver checks it at a small size, then
launches it at a benchmark size beyond the jailed worker's memory cap (a real subprocess, the product's
worker and its memory limit): what passed is reported, what the tool's limit cut off is an information note
at the driver's line, and nothing is an error on the kernel."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "taskless" / "repeat_main_benchmark_oom.py"


def simulate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nki_agent", "simulate", "repeat_main_benchmark_oom.py", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=180, check=False)


def test_a_benchmark_launch_beyond_the_memory_cap_after_the_check_passed_is_a_note_not_an_error(tmp_path: Path) -> None:
    shutil.copy(FIXTURE, tmp_path / FIXTURE.name)
    lines = FIXTURE.read_text().split("\n")
    driver_line = next(i for i, t in enumerate(lines, 1) if "28672" in t)
    proc = simulate(tmp_path, "--json")
    try:
        res = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert res["via"] == "main" and res["ran"], res
    assert [d for d in res["diagnostics"] if d["severity"] == "error"] == [], res["diagnostics"]
    (note,) = [d for d in res["diagnostics"] if d["code"] == "sim_memory_limit"]
    assert note["severity"] == "info" and note["line"] == driver_line, note
    assert "cut off" in note["message"] and "not an error of the kernel" in note["message"], note
    # what passed: the small launch, its outputs and the cost model's estimate of it
    assert [launch["completed"] for launch in res["launches"]] == [True, False], res["launches"]
    assert res["outputs"][0]["shape"] == [128, 1024] and res["estimate"] is not None
    text = simulate(tmp_path)
    assert text.returncode == 0, text.stdout + text.stderr
    assert (f"verdict: its checks pass (cut off at line {driver_line} by the simulator's memory limit) — "
            "self-reported by the file") in text.stdout, text.stdout
