"""``nki-agent profile``'s cost-model face: the estimate table (always labelled estimated, never a measurement),
``--json`` (``estimate`` and a top-level ``estimated_latency_us``), ``--target`` reaching the simulation,
and ``--timeline F.svg``.

Most cases fake ``api.profile`` / ``api.estimate`` with hand-built estimates (``cost_fixtures.py``), so they
do not depend on the cost model; the ``examples/l2_matmul`` cases run the real command as a subprocess
(the jailed verification and trace) and check what holds with or without a cost model installed.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from cost_fixtures import HOSTILE_API, estimate
from nki_agent.toolchain import api
from nki_agent.toolchain.protocol.jobs import Latency, ProfileResult, SeedFigures, SimulateResult
from nki_agent.toolchain.protocol.cost import CostEstimate
from rich.console import Console
from typer.testing import CliRunner

from nki_agent.cli import cost_view
from nki_agent.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
MATMUL = ROOT / "examples" / "l2_matmul"
KERNEL, TASK = str(MATMUL / "kernel_classic.py"), str(MATMUL / "task.py")


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NKI_AGENT_RUNNER_TOKEN"}
    env["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "nki_agent", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False, env=env)


def profiled(est: CostEstimate | None, latency: Latency | None = None, **kw: Any) -> ProfileResult:
    lat = latency or (Latency(kind="estimated", source="cost model", p50_us=est.latency_us, target=est.target)
                      if est is not None else Latency())
    return ProfileResult(kernel=KERNEL, task=TASK, target="trn1", compiled=True, correct=True, stage="correct",
                         runner="local", backend="simulator", sandbox="bwrap", latency=lat,
                         seeds=[SeedFigures(seed=0, correct=True)],
                         estimate=est.model_copy(update={"timeline": []}) if est is not None else None, **kw)


class Calls:
    def __init__(self) -> None:
        self.profile: list[dict[str, Any]] = []
        self.estimate: list[dict[str, Any]] = []


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Install fakes: ``fake(profile_result, traced_estimate)`` -> the calls they saw."""
    def install(result: ProfileResult, traced: CostEstimate | None = None) -> Calls:
        calls = Calls()

        def profile(kernel: str, task: str, **kw: Any) -> ProfileResult:
            calls.profile.append(dict(kw, kernel=kernel, task=task))
            return result.model_copy(deep=True)

        def estimate_(kernel: str, task: str, **kw: Any) -> SimulateResult:
            calls.estimate.append(dict(kw, kernel=kernel, task=task))
            return SimulateResult(kernel=kernel, task=task, ran=True, estimate=traced)

        monkeypatch.setattr(api, "profile", profile)
        monkeypatch.setattr(api, "estimate", estimate_)
        return calls
    return install


def run(*args: str) -> Any:
    return CliRunner().invoke(app, ["profile", KERNEL, "--task", TASK, *args], catch_exceptions=False)


def test_the_estimate_section_is_labelled_estimated_and_shows_engines_lines_loops() -> None:
    con = Console(record=True, width=160, file=io.StringIO())
    con.print(cost_view.render(estimate(api=HOSTILE_API)))
    out = con.export_text()
    assert "≈ 6.97 ms est. trn1, TensorE-bound (estimated by the cost model, not measured)" in out
    for shown in ("engines (est. busy time)", "TensorE", "DMA q1", "92.0 %", "82.0 % of TensorE peak",
                  "35.0 % of DMA bandwidth", "top lines (est., of 12)", "top loops (est., of 2)", "affine",
                  "37.0 %", "SBUF over capacity", "launch overhead 15 µs"):
        assert shown in out, shown
    assert "[bold]red[/bold]" in out  # a kernel-controlled string is never read as markup
    lines_shown = [ln for ln in out.splitlines() if "[bold]red[/bold]" in ln]
    assert len(lines_shown) == cost_view.TOP  # the top 10 of 12 lines
    assert "p50" not in out and "measured" not in out.replace("not measured", "")


def test_profile_table_prints_the_estimate_apart_from_the_latency(fake: Any) -> None:
    calls = fake(profiled(estimate()))
    res = run("--target", "trn1")
    assert res.exit_code == 0, res.output
    assert "≈ 6.97 ms est. trn1, TensorE-bound" in res.output
    assert "estimated (cost model), not measured" in res.output  # the latency row
    assert "p50" not in res.output and "iterations" not in res.output
    assert calls.profile[0]["target"] == "trn1" and not calls.estimate  # no extra trace without --timeline


def test_a_measured_latency_is_shown_as_measured_and_the_estimate_separately(fake: Any) -> None:
    measured = Latency(kind="measured", source="nki.benchmark", p50_us=7100.0, p99_us=7300.0, mean_us=7150.0,
                       std_us=40.0, iterations=20, warmup=5, core_id=0, target="trn1")
    fake(profiled(estimate(), latency=measured))
    res = run()
    assert res.exit_code == 0, res.output
    assert "measured (nki.benchmark)" in res.output and "7100.00 us" in res.output
    assert "≈ 6.97 ms est. trn1" in res.output and "estimated by the cost model, not measured" in res.output


def test_json_has_the_estimate_and_a_top_level_estimated_latency(fake: Any) -> None:
    fake(profiled(estimate()))
    res = run("--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["estimated_latency_us"] == 6970.0 and out["estimate"]["latency_us"] == 6970.0
    assert out["latency"]["kind"] == "estimated" and out["latency"]["source"] == "cost model"
    assert out["estimate"]["bound"] == "TensorE" and out["estimate"]["engines"]
    ProfileResult.model_validate(out)


def test_json_without_an_estimate_has_a_null_estimated_latency(fake: Any) -> None:
    fake(profiled(None))
    out = json.loads(run("--json").stdout)
    assert out["estimated_latency_us"] is None and out["estimate"] is None


def test_timeline_traces_once_more_in_the_jail_and_writes_the_svg(fake: Any, tmp_path: Path) -> None:
    calls = fake(profiled(estimate()), traced=estimate(bars=50))
    svg = tmp_path / "matmul-trn2.svg"
    res = run("--target", "trn2", "--timeline", str(svg))
    assert res.exit_code == 0, res.output
    assert calls.estimate == [{"kernel": KERNEL, "task": TASK, "target": "trn2", "kernel_name": None,
                               "timeline": True, "timeout": 60.0}]
    root = ET.fromstring(svg.read_bytes())
    assert "estimated" in "".join(next(root.iter("{http://www.w3.org/2000/svg}title")).itertext())


def test_a_result_without_an_estimate_takes_the_traced_one_without_its_timeline(fake: Any, tmp_path: Path) -> None:
    fake(profiled(None), traced=estimate(bars=50))
    res = run("--json", "--timeline", str(tmp_path / "t.svg"))
    out = json.loads(res.stdout)
    assert out["estimated_latency_us"] == 6970.0 and out["estimate"]["timeline"] == []
    assert out["latency"]["kind"] == "estimated" and out["stage"] == "latency"


def test_timeline_without_an_estimate_says_why_and_writes_nothing(fake: Any, tmp_path: Path) -> None:
    fake(profiled(None), traced=None)
    svg = tmp_path / "none.svg"
    res = run("--timeline", str(svg))
    assert res.exit_code == 0 and not svg.exists()
    assert "timeline not written: the cost model made no estimate" in res.output


def test_timeline_in_a_missing_folder_is_a_usage_error_before_anything_runs(fake: Any, tmp_path: Path) -> None:
    calls = fake(profiled(estimate()))
    res = CliRunner().invoke(app, ["profile", KERNEL, "--task", TASK, "--timeline", str(tmp_path / "no" / "t.svg")])
    assert res.exit_code == 2 and not calls.profile


# ------------------------------------------------------------- the real command on examples/l2_matmul
def test_l2_matmul_json_and_timeline_through_the_jail(tmp_path: Path) -> None:
    svg = tmp_path / "l2.svg"
    proc = cli("profile", KERNEL, "--task", TASK, "--target", "trn1", "--seeds", "1", "--json", "--timeline", str(svg))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert "estimated_latency_us" in out and "estimate" in out
    res = ProfileResult.model_validate(out)
    assert res.correct and res.target == "trn1" and res.sandbox in ("bwrap", "unsandboxed")
    assert res.latency.kind in ("estimated", "not measured")  # never "measured" on this machine
    if res.estimate is None:  # the cost model is not installed (yet): nothing is invented
        assert out["estimated_latency_us"] is None and res.latency.kind == "not measured"
        assert "timeline not written" in proc.stderr and not svg.exists()
        return
    assert out["estimated_latency_us"] == res.estimate.latency_us > 0
    assert res.latency.kind == "estimated" and res.latency.source == "cost model" and res.estimate.target == "trn1"
    root = ET.fromstring(svg.read_bytes())
    lanes = {g.get("data-lane") for g in root.iter("{http://www.w3.org/2000/svg}g")}
    assert "TensorE" in lanes


def test_l2_matmul_table_on_another_target(tmp_path: Path) -> None:
    proc = cli("profile", KERNEL, "--task", TASK, "--target", "trn2", "--seeds", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "trn2" in proc.stdout and "correct" in proc.stdout
    if "est. trn2" in proc.stdout:  # with the cost model: the estimate is of the asked target, labelled
        assert "estimated by the cost model, not measured" in proc.stdout
        assert "est. trn1" not in proc.stdout
    else:
        assert "not measured" in proc.stdout
