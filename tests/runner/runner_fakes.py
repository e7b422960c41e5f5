"""Test helpers for the runner service: a backend that holds jobs until released, and an in-process runner.

``GateBackend`` stands in for the embedded toolchain where a test needs jobs to stay queued or
running (queue limits, cancel, restart); ``StepBackend`` where a test releases jobs one by one and
reads the order they started in (fair scheduling); every other runner test uses the real simulator
backend.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from nki_agent.runner.backends import BackendInfo, PreparedJob, Progress, Slot
from nki_agent.runner.config import RunnerConfig
from nki_agent.runner.service import Runner, build
from nki_agent.toolchain.protocol.jobs import JobResult, ProblemInfo, VerifyResult

KERNEL = "def nki_kernel(a):\n    return a\n"


class GateBackend:
    """Each job waits until ``gate`` is set (or it is cancelled); ``started`` fires when one starts."""

    name = "simulator"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.ran: list[str] = []
        self._lock = threading.Lock()

    def info(self) -> BackendInfo:
        return BackendInfo(name=self.name, sdk_version="gate-1", sandbox="bwrap")

    def slots(self, workers: int) -> list[Slot]:
        return [Slot(i) for i in range(workers)]

    def run(self, job: PreparedJob, slot: Slot, cancel: threading.Event, progress: Progress) -> JobResult:
        with self._lock:
            self.ran.append(job.request.nonce or job.id)
        progress("gate: waiting")
        self.started.set()
        while not (self.gate.is_set() or cancel.is_set()):  # two events: wake on either
            self.gate.wait(0.1)
        if cancel.is_set():
            return VerifyResult(problems=[ProblemInfo(code="sim_cancelled", message="cancelled")])
        return VerifyResult(kernel=job.kernel_path, correct=True, compiled=True, stage="correct",
                            stderr=job.request.nonce or "")


class StepBackend:
    """Each job runs until the test releases it by nonce (or cancels it); ``log`` holds ("start" | "end",
    nonce, the job's timeout_s) in the order they happened. Waits are on a condition, never sleeps."""

    name = "simulator"

    def __init__(self) -> None:
        self.log: list[tuple[str, str, float]] = []
        self.requests: list[Any] = []  # each started job's request, in the order they started
        self._cond = threading.Condition()
        self._released: set[str] = set()
        self._all = False

    def info(self) -> BackendInfo:
        return BackendInfo(name=self.name, sdk_version="step-1", sandbox="bwrap")

    def slots(self, workers: int) -> list[Slot]:
        return [Slot(i) for i in range(workers)]

    def run(self, job: PreparedJob, slot: Slot, cancel: threading.Event, progress: Progress) -> JobResult:
        nonce = job.request.nonce or job.id
        with self._cond:
            self.log.append(("start", nonce, job.request.timeout_s))
            self.requests.append(job.request)
            self._cond.notify_all()
            while not (self._all or nonce in self._released or cancel.is_set()):
                self._cond.wait(0.1)  # the cancel event has no condition of its own
            self.log.append(("end", nonce, job.request.timeout_s))
            self._cond.notify_all()
        return VerifyResult(kernel=job.kernel_path, correct=True, compiled=True, stage="correct", stderr=nonce)

    def release(self, *nonces: str) -> None:
        with self._cond:
            self._released.update(nonces)
            self._cond.notify_all()

    def release_all(self) -> None:
        with self._cond:
            self._all = True
            self._cond.notify_all()

    @property
    def gate(self) -> StepBackend:  # ``running`` sets ``backend.gate`` at the end: release everything
        return self

    def set(self) -> None:
        self.release_all()

    def started(self) -> list[str]:
        with self._cond:
            return [n for kind, n, _ in self.log if kind == "start"]

    def wait_started(self, n: int, timeout: float = 60.0) -> bool:
        """Whether ``n`` jobs have started within ``timeout`` seconds (a safety net, not a measurement)."""
        with self._cond:
            return self._cond.wait_for(lambda: sum(1 for e in self.log if e[0] == "start") >= n, timeout)


def request(nonce: str | None = None, op: str = "verify", kernel: str = KERNEL, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"op": op, "kernel": {"name": "kernel.py", "text": kernel}, **extra}
    if nonce is not None:
        body["nonce"] = nonce
    return body


@contextmanager
def running(tmp_path: Path, backend: Any = None, token: str | None = None, **settings: Any) -> Iterator[tuple[Runner, TestClient]]:
    """An in-process runner over ``tmp_path`` (its state folder) and a test client of its app."""
    config = RunnerConfig(state_dir=str(tmp_path / "state"), token=token, **settings)
    runner = build(config, backend=backend)
    try:
        with TestClient(runner.app) as client:
            yield runner, client
    finally:
        if backend is not None and hasattr(backend, "gate"):
            backend.gate.set()
        runner.close()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
