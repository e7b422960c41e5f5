"""Test helpers for the runner service: a backend that holds jobs until released, and an in-process runner.

``GateBackend`` stands in for the embedded toolchain where a test needs jobs to stay queued or
running (queue limits, cancel, restart); every other runner test uses the real simulator backend.
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
from nki_agent.toolchain.protocol import JobResult, ProblemInfo, VerifyResult

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
