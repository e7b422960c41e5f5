"""What a runner backend is: it runs one prepared job on one slot and returns the job's typed result.

A backend never trusts the job: every piece of user code (kernel, task, sibling modules) runs in the
OS jail of ``toolchain/isolation/sandbox.py``; verdicts are computed outside the kernel's process
(``toolchain/judging/judge.py``). The job manager (``jobs.py``) owns queueing, slots and cancellation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from nki_agent.toolchain.protocol.jobs import JobRequest, JobResult, LatencyKind

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Slot:
    """Where a job runs: one worker slot; on the neuron backend one NeuronCore and its device file."""

    index: int
    core_id: int | None = None  # the NeuronCore pinned with NEURON_RT_VISIBLE_CORES (neuron backend)
    devices: tuple[str, ...] = ()  # device files passed into the jail (e.g. /dev/neuron0)


@dataclass(frozen=True)
class PreparedJob:
    """A job whose files are written into its own private folder (``kernel_path`` etc. are inside it)."""

    id: str
    request: JobRequest
    folder: str
    kernel_path: str
    task_path: str  # == kernel_path when the kernel file is its own task


@dataclass(frozen=True)
class BackendInfo:
    name: str  # neuron | simulator
    sdk_version: str | None = None
    nki_version: str | None = None
    generations: tuple[str, ...] = ("classic", "new")
    targets: tuple[str, ...] = ("trn1", "trn2", "trn3")
    neuron_cores: int = 0
    latency: LatencyKind = "not measured"
    sandbox: str = ""  # what the jail probe says: bwrap | unsandboxed
    extra: dict[str, str] = field(default_factory=dict)


class Backend(Protocol):
    name: str

    def info(self) -> BackendInfo: ...

    def slots(self, workers: int) -> list[Slot]:
        """The slots jobs may run on (the neuron backend: one per NeuronCore, at most ``workers``)."""
        ...

    def run(self, job: PreparedJob, slot: Slot, cancel: threading.Event, progress: Progress) -> JobResult:
        """Run ``job`` (never raises for user-code failures: they are the result's ``problems``)."""
        ...
