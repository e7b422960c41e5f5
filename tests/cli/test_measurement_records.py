"""Measured latencies recorded for calibration (``nki_agent/cli/measurements.py``): ``profile --runner URL``
appends one line per *measured* latency to ``<config dir>/measurements.jsonl`` (never for an estimate),
the file stays bounded, and bad lines are skipped when reading.

The runner is a real in-process runner on 127.0.0.1 (``runner_factory``) with a fake device backend that
reports a measured latency without running anything; the CLI runs in this process (its ``--runner`` is
installed process-wide, which is safe here because the fake backend never calls back into ``api``).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from cost_fixtures import estimate
from nki_agent.runner.backends import BackendInfo, PreparedJob, Progress, Slot
from nki_agent.toolchain.protocol.jobs import JobResult, Latency, ProfileResult, SeedFigures
from typer.testing import CliRunner

from nki_agent.cli import measurements
from nki_agent.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
KERNEL = ROOT / "examples" / "l2_matmul" / "kernel_classic.py"
TASK = ROOT / "examples" / "l2_matmul" / "task.py"
MEASURED_US = 7100.0


class MeasuringBackend:
    """A fake Trainium: every profile is correct and measured at ``MEASURED_US`` (with or without an estimate)."""

    name = "neuron"

    def __init__(self, with_estimate: bool = True, kind: str = "measured") -> None:
        self.with_estimate, self.kind = with_estimate, kind
        self.jobs: list[str] = []

    def info(self) -> BackendInfo:
        return BackendInfo(name=self.name, sdk_version="fake-1", targets=("trn1",), neuron_cores=1,
                           latency="measured", sandbox="bwrap")

    def slots(self, workers: int) -> list[Slot]:
        return [Slot(0, core_id=0)]

    def run(self, job: PreparedJob, slot: Slot, cancel: threading.Event, progress: Progress) -> JobResult:
        self.jobs.append(job.request.op)
        lat = (Latency(kind="measured", source="nki.benchmark", p50_us=MEASURED_US, p99_us=7300.0, mean_us=7150.0,
                       std_us=30.0, iterations=20, warmup=5, core_id=0, target="trn1")
               if self.kind == "measured" else Latency())
        return ProfileResult(kernel=job.kernel_path, task=job.task_path, target="trn1", compiled=True, correct=True,
                             stage="latency", seeds=[SeedFigures(seed=0, correct=True)], latency=lat,
                             estimate=estimate(bars=0) if self.with_estimate else None)


def profile_on(url: str, *extra: str) -> Any:
    return CliRunner().invoke(app, ["profile", str(KERNEL), "--task", str(TASK), "--runner", url, *extra],
                              catch_exceptions=False)


def lines(folder: Path) -> list[dict[str, Any]]:
    path = folder / measurements.MEASUREMENTS
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_a_measured_latency_is_recorded_with_the_estimate(runner_factory: Any, config_dir: Path) -> None:
    live = runner_factory(stand_in=MeasuringBackend())
    res = profile_on(live.url)
    assert res.exit_code == 0, res.output
    assert "measured (nki.benchmark)" in res.output and "≈ 6.97 ms est. trn1" in res.output
    [rec] = lines(config_dir)
    assert rec["kernel"] == str(KERNEL) and rec["task"] == str(TASK) and rec["target"] == "trn1"
    assert rec["measured_us"] == MEASURED_US and rec["estimated_us"] == 6970.0 and rec["when"]
    assert rec["kernel_sha256"] == measurements.file_sha256(KERNEL)
    res = profile_on(live.url, "--json")
    assert json.loads(res.stdout)["estimated_latency_us"] == 6970.0
    assert len(lines(config_dir)) == 2  # one line per measurement


def test_without_a_remote_estimate_the_estimate_is_made_in_the_local_jail(runner_factory: Any,
                                                                          config_dir: Path) -> None:
    backend = MeasuringBackend(with_estimate=False)
    live = runner_factory(stand_in=backend)
    res = profile_on(live.url, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert backend.jobs == ["profile"]  # the estimate's trace did not go to the runner
    assert out["latency"]["kind"] == "measured" and out["latency"]["p50_us"] == MEASURED_US
    [rec] = lines(config_dir)
    assert rec["measured_us"] == MEASURED_US
    assert rec["estimated_us"] == out["estimated_latency_us"]  # None only without a cost model
    if out["estimate"] is not None:
        assert out["estimate"]["target"] == "trn1" and out["estimate"]["timeline"] == []


def test_an_unmeasured_latency_is_not_recorded(runner_factory: Any, config_dir: Path) -> None:
    live = runner_factory(stand_in=MeasuringBackend(kind="not measured"))
    res = profile_on(live.url)
    assert res.exit_code == 0, res.output
    assert lines(config_dir) == []


def test_a_local_profile_records_nothing(config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nki_agent.toolchain import api

    measured = ProfileResult(kernel=str(KERNEL), compiled=True, correct=True,
                             latency=Latency(kind="measured", p50_us=5.0, target="trn1"))
    monkeypatch.setattr(api, "profile", lambda *a, **kw: measured)
    res = CliRunner().invoke(app, ["profile", str(KERNEL), "--task", str(TASK)])
    assert res.exit_code == 0 and lines(config_dir) == []


def test_config_dir_honours_the_environment(config_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    assert measurements.config_dir() == config_dir
    monkeypatch.delenv(measurements.CONFIG_ENV)
    assert measurements.config_dir() == Path.home() / ".config" / "nki-agent"


def test_records_round_trip_and_bad_lines_are_skipped(config_dir: Path) -> None:
    m = measurements.Measurement(kernel="/k.py", task="/t.py", target="trn1", measured_us=12.5, estimated_us=10.0)
    path = measurements.record(m)
    with open(path, "a") as fh:
        bad = {"kernel": "/k", "task": "/t", "target": "trn1", "measured_us": -3}
        fh.write("not json\n{\"kernel\": 1}\n" + json.dumps(bad) + "\n\n")
    measurements.record(measurements.Measurement(kernel="/k2.py", task="/t.py", target="trn2", measured_us=3.0))
    got = list(measurements.read())
    assert [(g.kernel, g.measured_us, g.estimated_us) for g in got] == [("/k.py", 12.5, 10.0), ("/k2.py", 3.0, None)]
    assert [g.kernel for g in measurements.read(target="trn2")] == ["/k2.py"]
    assert (path.stat().st_mode & 0o777) == 0o600


def test_the_file_stays_bounded_and_keeps_the_newest(config_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measurements, "MAX_BYTES", 4096)
    for i in range(200):
        measurements.record(measurements.Measurement(kernel=f"/k{i}.py", task="/t.py", target="trn1",
                                                     measured_us=float(i + 1)))
    path = config_dir / measurements.MEASUREMENTS
    assert path.stat().st_size <= 4096
    kept = [m.kernel for m in measurements.read()]
    assert kept[-1] == "/k199.py" and 10 < len(kept) < 200
    assert kept == sorted(kept, key=lambda k: int(k[2:-3]))  # whole lines, oldest dropped first
