"""Test helpers for the neuron backend: prepared jobs from source text, and the fake device of tests/fixtures/fake_neuron.

``fake_device(tmp_path, monkeypatch, devices=1)`` makes the plain device files the jail binds at
``/dev/neuronN`` (``NKI_AGENT_TEST_DEVICE_DIR``) and puts the fake SDK on the roles' path
(``NKI_AGENT_SDK_PATH``); ``prepared(tmp_path, op, kernel, task)`` writes a job's files into its own
folder as the job manager does and returns the ``PreparedJob``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from nki_agent.runner.backends import PreparedJob
from nki_agent.runner.backends.baseline import SDK_PATH_VAR
from nki_agent.toolchain.isolation import jail
from nki_agent.toolchain.protocol.jobs import JobRequest, SourceFile

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "fixtures" / "fake_neuron"
EXAMPLES = ROOT / "examples"
NC_PER_DEVICE = 2


def fake_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, devices: int = 1, sdk: bool = True) -> Path:
    folder = tmp_path / "fake-dev"
    folder.mkdir(exist_ok=True)
    for i in range(devices):
        (folder / f"neuron{i}").write_text(json.dumps({"neuron_device": i, "nc_count": NC_PER_DEVICE,
                                                       "target": "trn1"}))
    monkeypatch.setenv(jail.TEST_DEVICE_DIR, str(folder))
    if sdk:
        monkeypatch.setenv(SDK_PATH_VAR, str(FAKE / "site"))
    else:
        monkeypatch.delenv(SDK_PATH_VAR, raising=False)
    return folder


def small_add_task(rows: int = 256, cols: int = 128) -> str:
    return (EXAMPLES / "l1_add" / "task.py").read_text().replace("2112, 1024", f"{rows}, {cols}")


def example_kernel(name: str) -> str:
    return (EXAMPLES / "l1_add" / name).read_text()


def prepared(tmp_path: Path, op: str, kernel: str, task: str | None, name: str = "job", **request: Any) -> PreparedJob:
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.py").write_text(kernel)
    files: dict[str, Any] = {"kernel": SourceFile(name="kernel.py", text=kernel)}
    task_path = folder / "kernel.py"
    if task is not None:
        (folder / "task.py").write_text(task)
        files["task"] = SourceFile(name="task.py", text=task)
        task_path = folder / "task.py"
    req = JobRequest(op=op, **files, **request)  # type: ignore[arg-type]
    return PreparedJob(id=name, request=req, folder=str(folder), kernel_path=str(folder / "kernel.py"),
                       task_path=str(task_path))
