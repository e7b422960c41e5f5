"""``nki-agent calibrate``: CSV rows and recorded measurements, re-traced in the jail, fitted by the cost
package's ``calibration.fit``, written as ``nki-agent-calibration-<target>.json`` into ``--out`` or the
config folder (``NKI_AGENT_CONFIG_DIR``, a temp folder in every test: see ``conftest.py``)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from nki_agent.cli import calibrate, measurements
from nki_agent.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
MATMUL = (EXAMPLES / "l2_matmul" / "kernel_classic.py", EXAMPLES / "l2_matmul" / "task.py")
ADD = (EXAMPLES / "l1_add" / "kernel_classic.py", EXAMPLES / "l1_add" / "task.py")
HAVE_FIT = importlib.util.find_spec("nki_agent.toolchain.cost.calibration") is not None
needs_fit = pytest.mark.skipif(not HAVE_FIT, reason="the cost model's calibration.fit is not installed")


def run(*args: str) -> Any:
    return CliRunner().invoke(app, ["calibrate", *args], catch_exceptions=False)


def write_csv(path: Path, *rows: str) -> Path:
    path.write_text("\n".join(rows) + "\n")
    return path


def test_csv_rows_header_comments_targets_and_relative_paths(tmp_path: Path) -> None:
    (tmp_path / "k").mkdir()
    csv = write_csv(tmp_path / "m.csv", "kernel,task,target,measured_us,kernel_name", "# a comment", "",
                    "k/kern.py,k/task.py,trn1,12.5", f"{MATMUL[0]},{MATMUL[1]},trn2,99,nki_matmul",
                    f"{MATMUL[0]},{MATMUL[1]},TRN1,7,")
    rows, other = calibrate.read_csv(str(csv), "trn1")
    assert other == 1
    assert [(r.kernel, r.task, r.measured_us, r.kernel_name) for r in rows] == [
        (str(tmp_path / "k" / "kern.py"), str(tmp_path / "k" / "task.py"), 12.5, None),
        (str(MATMUL[0]), str(MATMUL[1]), 7.0, None)]


@pytest.mark.parametrize("row, message", [
    ("a.py,t.py,trn1", "expected kernel,task,target,measured_us"),
    ("a.py,t.py,trn1,fast", "is not a positive number"),
    ("a.py,t.py,trn1,-4", "is not a positive number"),
    ("a.py,t.py,trn1,nan", "is not a positive number"),
    ("a.py,t.py,trn9,4", "unknown target 'trn9'"),
])
def test_a_malformed_row_is_a_usage_error_naming_its_line(tmp_path: Path, row: str, message: str) -> None:
    res = run("--csv", str(write_csv(tmp_path / "bad.csv", "kernel,task,target,measured_us", row)))
    # the usage error is a panel wrapped to the terminal's width (a long temp path moves the breaks):
    # compare without the frame, the spacing and the line breaks
    flat = re.sub(r"[\s│╭╮╰╯─]+", "", res.output)
    assert res.exit_code == 2 and re.sub(r"\s+", "", message) in flat and "bad.csv:2" in flat, res.output


def test_nothing_to_fit_says_how_to_get_measurements() -> None:
    res = run()
    assert res.exit_code == 1 and "no measurements for trn1" in res.output


def test_a_missing_kernel_is_skipped_and_nothing_is_fitted(tmp_path: Path, config_dir: Path) -> None:
    csv = write_csv(tmp_path / "m.csv", f"{tmp_path / 'gone.py'},{MATMUL[1]},trn1,10")
    res = run("--csv", str(csv))
    assert res.exit_code == 1 and "does not exist" in res.output and "nothing to fit" in res.output
    assert not config_dir.exists() or not list(config_dir.iterdir())


@needs_fit
def test_calibrate_a_csv_into_the_config_folder(tmp_path: Path, config_dir: Path) -> None:
    from nki_agent.toolchain.cost.calibration import load_calibration

    csv = write_csv(tmp_path / "m.csv", "kernel,task,target,measured_us",
                    f"{MATMUL[0]},{MATMUL[1]},trn1,180", f"{ADD[0]},{ADD[1]},trn1,60")
    res = run("--csv", str(csv), "--target", "trn1")
    assert res.exit_code == 0, res.output
    out = res.output
    assert "2 pair(s) on trn1: error before ×" in out and "after ×" in out
    assert "l2_matmul/kernel_classic.py" in out and "l1_add/kernel_classic.py" in out
    path = config_dir / "nki-agent-calibration-trn1.json"
    assert f"calibration written to {path}" in out
    cal = load_calibration("trn1", [config_dir])
    assert cal is not None and cal.pairs == 2 and cal.error_after <= cal.error_before
    assert not [p for p in config_dir.iterdir() if p.name.endswith(".tmp")]


@needs_fit
def test_recorded_measurements_are_used_and_a_changed_kernel_is_skipped(tmp_path: Path, config_dir: Path) -> None:
    kernel = tmp_path / "proj" / "kernel_classic.py"
    kernel.parent.mkdir()
    kernel.write_text(ADD[0].read_text())
    measurements.record(measurements.Measurement(kernel=str(MATMUL[0]), task=str(MATMUL[1]), target="trn1",
                                                 measured_us=150.0,
                                                 kernel_sha256=measurements.file_sha256(MATMUL[0])))
    measurements.record(measurements.Measurement(kernel=str(kernel), task=str(ADD[1]), target="trn1",
                                                 measured_us=50.0, kernel_sha256="0" * 64))
    measurements.record(measurements.Measurement(kernel=str(MATMUL[0]), task=str(MATMUL[1]), target="trn2",
                                                 measured_us=90.0))
    out_dir = tmp_path / "out"
    res = run("--out", str(out_dir))
    assert res.exit_code == 0, res.output
    assert "the kernel changed since it was measured" in res.output
    assert "1 pair(s) on trn1" in res.output
    assert (out_dir / calibrate.calibration_file("trn1")).is_file()
    assert not (config_dir / calibrate.calibration_file("trn1")).exists()


@needs_fit
def test_an_unwritable_out_is_a_usage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    csv = write_csv(tmp_path / "m.csv", f"{ADD[0]},{ADD[1]},trn1,60")
    res = run("--csv", str(csv), "--out", str(blocker / "sub"))
    assert res.exit_code == 2 and "cannot write the calibration" in res.output
