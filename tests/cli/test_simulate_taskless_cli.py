"""``nki-agent simulate KERNEL`` without ``--task`` (a real subprocess): a discovered task is used; with none,
the file's ``__main__`` driver, then a pytest test that calls the kernel, then its shape lines — the same
order as the editor's save — and it says what ran, or that there are no inputs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TASKLESS = ROOT / "tests" / "fixtures" / "taskless"


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nki_agent", "simulate", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=180, check=False)


def as_json(proc: subprocess.CompletedProcess[str]) -> Any:
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for name in ("add_main.py", "add_main_wrong.py", "add_shapes.py", "add_bare.py"):
        shutil.copy(TASKLESS / name, tmp_path / name)
    shutil.copy(TASKLESS / "pytest_style" / "scale_lib.py", tmp_path / "scale_lib.py")
    (tmp_path / "tests").mkdir()
    shutil.copy(TASKLESS / "pytest_style" / "scale_lib_test_source.py", tmp_path / "tests" / "test_scale_lib.py")
    return tmp_path


def test_the_order_main_then_test_then_shape_line(folder: Path) -> None:
    # 1. the driver
    res = as_json(cli(folder, "add_main.py", "--json"))
    assert res["via"] == "main" and res["ran"] and res["sandbox"] in ("bwrap", "unsandboxed")
    assert [(launch["kernel_name"], [i["shape"] for i in launch["inputs"]], launch["grid"]) for launch in res["launches"]] \
        == [("tile_add_kernel", [[256, 1024], [256, 1024]], [2, 2])]
    assert res["trace"] and not res["diagnostics"]
    # a driver comes before a shape line and a test: add both, the driver still runs
    text = (folder / "add_main.py").read_text().replace("@nki.jit", "# nki[2, 2]: x_in=(256, 1024) float32, "
                                                        "y_in=(256, 1024) float32\n@nki.jit")
    (folder / "add_main.py").write_text(text)
    assert as_json(cli(folder, "add_main.py", "--json"))["via"] == "main"
    # 2. no driver: the test under the current folder that calls the kernel
    proc = cli(folder, "scale_lib.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "via test_scale_lib.py::test_scale_rows" in proc.stdout
    assert "launched scale_rows_kernel(float32[128, 256], float32[128, 1])" in proc.stdout
    # a test comes before a shape line
    (folder / "scale_lib.py").write_text((folder / "scale_lib.py").read_text().replace(
        "@nki.jit", "# nki: x_in=(128, 64) float32, w_in=(128, 1) float32\n@nki.jit"))
    assert as_json(cli(folder, "scale_lib.py", "--json"))["via"] == "test"
    # 3. neither: the shape line
    proc = cli(folder, "add_shapes.py")
    assert proc.returncode == 0 and "from the shape line" in proc.stdout, proc.stdout + proc.stderr
    res = as_json(cli(folder, "add_shapes.py", "--json"))
    assert res["via"] == "shapes" and res["launches"][0]["inputs"][0]["shape"] == [128, 512]


def test_a_failing_driver_check_exits_1_at_its_line(folder: Path) -> None:
    proc = cli(folder, "add_main_wrong.py", "--json")
    assert proc.returncode == 1
    res = as_json(proc)
    [d] = res["diagnostics"]
    assert d["code"] == "sim_wrong_result" and d["line"] == 22 and d["path"].endswith("add_main_wrong.py")
    assert res["via"] == "main" and res["ran"]


def test_no_inputs_says_so_and_exits_1(folder: Path) -> None:
    proc = cli(folder, "add_bare.py")
    assert proc.returncode == 1
    assert "no task and no inputs" in proc.stdout and "# nki:" in proc.stdout
    assert as_json(cli(folder, "add_bare.py", "--json"))["via"] == "none"


def test_a_discovered_task_wins_and_in_process_runs_the_same(folder: Path) -> None:
    shutil.copy(ROOT / "examples" / "l1_add" / "kernel_classic.py", folder / "kernel_classic.py")
    shutil.copy(ROOT / "examples" / "l1_add" / "task.py", folder / "task.py")
    res = as_json(cli(folder, "kernel_classic.py", "--json"))
    assert res["via"] == "task" and res["task"].endswith("task.py") and res["ran"]
    (folder / "task.py").unlink()
    res = as_json(cli(folder, "add_main.py", "--json", "--in-process"))
    assert res["via"] == "main" and res["sandbox"] == "in-process" and res["launches"]
