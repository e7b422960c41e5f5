"""Every isolated job of the tools goes through the ``Runner`` seam (``toolchain/isolation/runner.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nki_agent.agent.tools import ToolBox
from nki_agent.toolchain import api
from nki_agent.toolchain.isolation import runner
from nki_agent.toolchain.protocol.jobs import (
    CompileResult,
    ProfileResult,
    SimulateResult,
    TaskDescription,
    VerifyResult,
)

ADD = Path(__file__).resolve().parents[2] / "examples" / "l1_add"


class Recording:
    """A runner that answers from the local one and records what it was asked (a remote runner's stand-in)."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.local = runner.LocalRunner()

    def verify(self, kernel: str, task: str, **kw: Any) -> VerifyResult:
        self.calls.append(("verify", Path(kernel).name))
        return self.local.verify(kernel, task, **kw).model_copy(update={"runner": self.name})

    def simulate(self, kernel: str, task: str, **kw: Any) -> SimulateResult:
        self.calls.append(("simulate", Path(kernel).name))
        return self.local.simulate(kernel, task, **kw).model_copy(update={"runner": self.name})

    def compile(self, kernel: str, task: str, **kw: Any) -> CompileResult:
        self.calls.append(("compile", Path(kernel).name))
        return self.local.compile(kernel, task, **kw).model_copy(update={"runner": self.name})

    def profile(self, kernel: str, task: str, **kw: Any) -> ProfileResult:
        self.calls.append(("profile", Path(kernel).name))
        return self.local.profile(kernel, task, **kw).model_copy(update={"runner": self.name})

    def describe(self, task: str, **kw: Any) -> TaskDescription:
        self.calls.append(("describe", Path(task).name))
        return self.local.describe(task, **kw).model_copy(update={"sandbox": self.name})


@pytest.fixture
def recording() -> Iterator[Recording]:
    rec = Recording()
    previous = runner.use(rec)
    try:
        yield rec
    finally:
        runner.use(previous)


def test_api_jobs_go_to_the_installed_runner(recording: Recording) -> None:
    k, t = str(ADD / "kernel_new.py"), str(ADD / "task.py")
    assert api.verify(k, t, seeds=1).runner == "recording"
    assert api.simulate(k, t).runner == "recording"
    assert api.compile(k, t).runner == "recording"
    assert api.profile(k, t, seeds=1).runner == "recording"
    assert api.describe_task(t).sandbox == "recording"
    local = api.verify(k, t, seeds=1, isolate=False)  # in-process tests bypass it
    assert local.runner == "local" and local.sandbox == "in-process"
    assert recording.calls == [("verify", "kernel_new.py"), ("simulate", "kernel_new.py"),
                               ("compile", "kernel_new.py"), ("profile", "kernel_new.py"), ("describe", "task.py")]


def test_the_agents_verification_goes_through_the_seam(recording: Recording) -> None:
    text = (ADD / "kernel_new.py").read_text()
    tools = ToolBox(str(ADD / "kernel_new.py"), text, str(ADD / "task.py"), seeds=1)
    try:
        assert tools.verify(text).verified
    finally:
        tools.close()
    assert [c[0] for c in recording.calls] == ["verify"]


def test_the_default_runner_is_local() -> None:
    assert runner.current().name == "local"
