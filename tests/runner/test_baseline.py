"""The baseline op: the task's reference timed in its own jail, always labelled where it ran."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from neuron_helpers import example_kernel, fake_device, prepared, small_add_task
from nki_agent.runner.backends import Slot
from nki_agent.runner.backends.baseline import run_baseline

MODEL_TASK = '''import torch


class Model(torch.nn.Module):
    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(128, 64), torch.randn(128, 64)]
'''


def test_a_numpy_reference_is_timed_on_the_cpu_and_says_so(tmp_path: Path) -> None:
    job = prepared(tmp_path, "baseline", example_kernel("kernel_new.py"), small_add_task(), warmup=2, iterations=20)
    res = run_baseline(job, Slot(0), threading.Event())
    assert not [p for p in res.problems if p.severity == "error"], res.problems
    assert res.op == "baseline" and res.label == "cpu" and res.backend == "simulator"
    lat = res.latency
    assert lat.kind == "measured" and lat.source == "cpu" and lat.warmup == 2 and 1 <= lat.iterations <= 20
    assert lat.p50_us and lat.mean_us and lat.std_us is not None and lat.min_us <= lat.p50_us <= lat.max_us
    assert lat.core_id is None
    assert any(p.code == "runner_baseline_cpu" and "NumPy" in p.message for p in res.problems)


def test_a_model_task_without_torch_neuronx_runs_on_the_cpu_even_on_a_neuron_slot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_device(tmp_path, monkeypatch)
    job = prepared(tmp_path, "baseline", example_kernel("kernel_new.py"), MODEL_TASK, iterations=10)
    res = run_baseline(job, Slot(0, core_id=1, devices=("/dev/neuron0",)), threading.Event())
    assert res.label == "cpu" and res.latency.kind == "measured" and res.latency.core_id is None
    assert res.backend == "neuron"
    assert any("torch-neuronx is not installed" in p.message for p in res.problems), res.problems


def test_a_task_that_fails_is_a_problem_not_a_latency(tmp_path: Path) -> None:
    job = prepared(tmp_path, "baseline", example_kernel("kernel_new.py"),
                   "def get_inputs():\n    raise ValueError('no inputs today')\n\ndef reference(a):\n    return a\n")
    res = run_baseline(job, Slot(0), threading.Event())
    assert res.latency.kind == "not measured" and res.label == ""
    assert [p.code for p in res.problems] == ["sim_task_error"] and "no inputs today" in res.problems[0].message


def test_a_missing_device_is_refused_before_anything_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_device(tmp_path, monkeypatch, devices=1)
    job = prepared(tmp_path, "baseline", example_kernel("kernel_new.py"), small_add_task())
    res = run_baseline(job, Slot(3, core_id=6, devices=("/dev/neuron3",)), threading.Event())
    assert res.latency.kind == "not measured" and "does not exist" in res.problems[0].message
