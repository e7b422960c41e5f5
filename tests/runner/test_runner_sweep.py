"""``sweep: true``: a kernel is also judged on the task's unseen shapes (``get_sweep_inputs()``), so a kernel
specialised to the visible shapes fails; a general kernel passes; a task without a sweep is unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
from runner_fakes import running

ROOT = Path(__file__).resolve().parents[2]
KERNEL = (ROOT / "tests" / "server" / "workspace" / "add" / "kernel.py").read_text()
TASK = (ROOT / "tests" / "server" / "workspace" / "add" / "task.py").read_text() + '''

def get_sweep_inputs():
    return [[np.random.randn(rows, 512).astype(np.float32), np.random.randn(rows, 512).astype(np.float32)]
            for rows in (64, 448)]
'''
SPECIALISED = KERNEL.replace("n_rows, n_cols = a.shape", "n_rows, n_cols = 320, 512  # the visible shape only")


def _job(kernel: str, task: str, sweep: bool) -> dict:
    return {"op": "verify", "kernel": {"name": "kernel.py", "text": kernel}, "task": {"name": "task.py", "text": task},
            "sweep": sweep, "seeds": 2}


@pytest.mark.parametrize(("kernel", "sweep", "correct", "cases"), [
    (KERNEL, True, True, 2), (SPECIALISED, False, True, 0), (SPECIALISED, True, False, 2)])
def test_the_sweep_catches_kernels_specialised_to_the_visible_shapes(tmp_path, kernel, sweep, correct, cases):
    with running(tmp_path, cache=False) as (_, client):
        status = client.post("/v1/verify", json=_job(kernel, TASK, sweep)).json()
    result = status["result"]
    assert status["state"] == "done" and result["correct"] is correct, result
    sweep_seeds = [s for s in result["seeds"] if s["message"].startswith("unseen shape case")]
    assert len(sweep_seeds) == cases
    assert ("shape_sweep_failed" in result["flags"]) is (not correct)
    assert all(s["seed"] is None and s["hidden"] for s in sweep_seeds)


def test_a_task_without_sweep_inputs_is_verified_as_before(tmp_path):
    task = (ROOT / "tests" / "server" / "workspace" / "add" / "task.py").read_text()
    with running(tmp_path, cache=False) as (_, client):
        result = client.post("/v1/verify", json=_job(KERNEL, task, True)).json()["result"]
    assert result["correct"] and not [s for s in result["seeds"] if "unseen" in s["message"]]
