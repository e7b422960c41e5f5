"""Calibration files are picked up automatically: the packaged trn1 fit, a user's file in the config
folder (in-process and through the jail, where the parent sends it with the job), and bad ones refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nki_agent.toolchain import api
from nki_agent.toolchain.cost import calibration
from nki_agent.toolchain.cost.calibration import effective_constants, parse_overrides

ROOT = Path(__file__).resolve().parents[2]
MM = ROOT / "examples" / "l2_matmul"


@pytest.fixture()
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "config"
    d.mkdir()
    monkeypatch.setenv("NKI_AGENT_CONFIG_DIR", str(d))
    monkeypatch.setattr(calibration, "_WARNED", False)
    return d


def _write(d: Path, target: str, **values: float) -> None:
    (d / f"nki-agent-calibration-{target}.json").write_text(json.dumps({"target": target, "constants": values}))


def test_packaged_fit_is_the_default(config_dir: Path) -> None:
    c = effective_constants("trn1")
    assert c.source == "packaged nki-agent-calibration-trn1.json"
    packaged = json.loads((calibration.PACKAGED / "nki-agent-calibration-trn1.json").read_text())
    assert c.free_values() == pytest.approx(packaged["constants"])
    assert effective_constants("trn3").source == c.source  # no trn3 measurements: trn1's fitted constants


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "jailed"])
def test_a_user_calibration_changes_the_estimate(config_dir: Path, isolate: bool) -> None:
    base = api.simulate(str(MM / "kernel_classic.py"), str(MM / "task.py"), isolate=isolate)
    assert base.estimate is not None and base.estimate.calibration.startswith("packaged")
    _write(config_dir, "trn1", launch_overhead_us=500.0)
    res = api.simulate(str(MM / "kernel_classic.py"), str(MM / "task.py"), isolate=isolate)
    assert res.estimate is not None and res.estimate.calibration == "user nki-agent-calibration-trn1.json"
    assert res.estimate.overhead_us == 500.0
    assert res.estimate.latency_us > base.estimate.latency_us + 400


def test_a_broken_user_calibration_is_reported_and_not_used(config_dir: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (config_dir / "nki-agent-calibration-trn1.json").write_text('{"constants": {"warp_speed": 9}}')
    res = api.simulate(str(MM / "kernel_classic.py"), str(MM / "task.py"), isolate=False)
    assert res.estimate is not None and res.estimate.calibration.startswith("packaged")
    assert "calibration not used" in capsys.readouterr().err and "warp_speed" not in res.estimate.calibration


@pytest.mark.parametrize("bad", [[], {"trn1": 3}, {"trn1": {"warp": 1.0}}, {"trn1": {"dma_fixed_ns": -1}},
                                 {"trn1": {"dma_fixed_ns": float("nan")}}, {"trn1": {"dma_fixed_ns": True}},
                                 {"trn9": {"dma_fixed_ns": 1.0}}])
def test_request_field_is_validated(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_overrides(bad)
    assert parse_overrides({"gen2": {"dma_fixed_ns": 5}}) == {"trn1": {"dma_fixed_ns": 5.0}}
