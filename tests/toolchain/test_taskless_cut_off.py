"""A task-less run that a limit of the simulator stopped after a launch of the file completed (``run.cut_off``):
the limit is an information note at the driver's line saying what was cut off and what ran, never the kernel's
error; the verdict (``verdict.claim`` / ``glyph``) says it was cut off, and a driver that compares nothing gets
the neutral glyph. Also: a task-less run carries the cost model's estimate of its first launch."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from nki_agent.toolchain import api, taskless
from nki_agent.toolchain.protocol.jobs import ProblemInfo, SimulateResult
from nki_agent.toolchain.taskless.run import LaunchView, cut_off

ROOT = Path(__file__).resolve().parents[2]
TASKLESS = ROOT / "tests" / "fixtures" / "taskless"
K = "/w/k.py"
SMALL = [{"shape": [128, 512], "dtype": "float32"}, {"shape": None, "dtype": "int", "value": "2"}]


def limit(code: str = "sim_memory_limit", line: int = 13) -> dict[str, Any]:
    return {"code": code, "severity": "error", "message": "kernel exhausted memory while simulating",
            "location": {"path": K, "line": line, "column": 5, "end_line": line, "end_column": 9}, "related": []}


def test_a_limit_after_a_completed_launch_is_an_information_note_at_the_driver_line() -> None:
    problems = [limit()]
    cut_off(problems, [LaunchView("k", SMALL, 24, True), LaunchView("k", SMALL, 27, False)], K, "main")
    (p,) = problems
    assert (p["code"], p["severity"], p["location"]["path"], p["location"]["line"]) == \
        ("sim_memory_limit", "info", K, 27)  # the driver's launch, not the kernel's allocation (line 13)
    msg = str(p["message"])
    assert msg.startswith("cut off: the simulator's memory limit stopped the __main__ driver here"), msg
    assert "not an error of the kernel" in msg and "1 launch of this file completed before it" in msg, msg
    assert "k(float32[128, 512], int)" in msg, msg


def test_a_time_limit_is_cut_off_the_same_way_and_other_errors_are_left_alone() -> None:
    wrong = {**limit("sim_wrong_result", 25), "message": "the __main__ driver's check failed"}
    problems = [wrong, limit("sim_timeout")]
    cut_off(problems, [LaunchView("k", SMALL, 24, True), LaunchView("k", SMALL, 27, False)], K, "main")
    assert problems[0] == wrong
    assert problems[1]["severity"] == "info" and "time limit" in str(problems[1]["message"])


def test_a_limit_before_any_launch_completed_stays_an_error() -> None:
    problems = [limit()]
    cut_off(problems, [LaunchView("k", SMALL, 27, False)], K, "main")
    assert problems == [limit()]
    cut_off(problems, [], K, "main")
    assert problems == [limit()]


def test_a_limit_outside_a_launch_is_noted_where_the_driver_stopped() -> None:
    """The driver's own allocation ran out (no launch was running): the note sits at the problem's line."""
    problems = [limit(line=30)]
    cut_off(problems, [LaunchView("k", SMALL, 24, True)], K, "main")
    assert (problems[0]["severity"], problems[0]["location"]["line"]) == ("info", 30)
    assert "at its launch of" not in str(problems[0]["message"])


def result(via: str, *problems: dict[str, Any]) -> SimulateResult:
    return SimulateResult(kernel=K, via=via, ran=True, self_reported=True,
                          problems=[ProblemInfo.model_validate(p) for p in problems])


def test_the_verdict_says_cut_off_and_gives_no_tick_to_a_driver_that_checks_nothing() -> None:
    noted = [limit()]
    cut_off(noted, [LaunchView("k", SMALL, 24, True), LaunchView("k", SMALL, 27, False)], K, "main")
    res = result("main", *noted)
    assert taskless.claim(res) == ("its checks pass (cut off at line 27 by the simulator's memory limit) — "
                                   "self-reported by the file")
    assert taskless.glyph(res) == "✓"
    plain = result("main")
    assert taskless.claim(plain, main_checks=False) == "ran, nothing checked — self-reported by the file"
    assert taskless.glyph(plain, main_checks=False) == "○"
    assert taskless.glyph(result("test"), main_checks=False) == "✓"  # a test compares: the flag is the driver's


def test_a_taskless_run_carries_the_cost_models_estimate(tmp_path: Path) -> None:
    kernel = tmp_path / "add_main.py"
    shutil.copy(TASKLESS / "add_main.py", kernel)
    res = api.simulate_taskless(str(kernel), root=str(tmp_path), isolate=False, timeout=60)
    assert res.via == "main" and res.ran and not [p for p in res.problems if p.severity == "error"], res.problems
    assert res.estimate is not None and res.estimate.latency_us > 0 and res.estimate.target == res.target
    assert {row.line for row in res.estimate.lines} >= {16, 19}  # the kernel's loads and store are timed


def test_a_benchmark_driver_runs_the_kernel_once_and_its_latency_read_is_a_note(tmp_path: Path) -> None:
    """``nki.benchmark(warmup=5, iters=10)``: one launch at the driver's shape; reading the latency the simulator
    cannot measure cuts the driver off at that line (a note), after its check passed."""
    kernel = tmp_path / "add_main_benchmark.py"
    shutil.copy(TASKLESS / kernel.name, kernel)
    lines = kernel.read_text().split("\n")
    read_line = next(i for i, t in enumerate(lines, 1) if "benchmark_result" in t)
    res = api.simulate_taskless(str(kernel), root=str(tmp_path), isolate=False, timeout=60)
    assert [launch.completed for launch in res.launches] == [True, True]  # the check, then the benchmark once
    assert not [p for p in res.problems if p.severity == "error"], res.problems
    (note,) = [p for p in res.problems if p.code == "sim_unsupported_api"]
    assert note.severity == "info" and note.location is not None and note.location.line == read_line, note
    assert "a measured latency needs Trainium hardware" in note.message, note.message
    assert taskless.claim(res).startswith(f"its checks pass (cut off at line {read_line} by an API the simulator")
