"""The results the editor shows, as plain data: a static check and a run (simulate / verify / remote) of one
buffer revision, each with the settings it was computed under (``key``), so nothing computed for another
target, API generation or runner is shown as current."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...toolchain.protocol.jobs import SimulateResult, TraceEntry, VerifyResult
from ..model import Diagnostic, Fix


@dataclass(frozen=True)
class StaticResult:
    revision: int
    version: int
    diagnostics: tuple[Diagnostic, ...]
    fixes: dict[int, list[Fix]] = field(default_factory=dict)


@dataclass(frozen=True)
class RunResult:
    """A simulation or verification of one buffer revision: the toolchain's typed result and its diagnostics."""

    kind: str  # simulate | verify | remote (a profile job on the remote runner)
    revision: int
    version: int
    diagnostics: tuple[Diagnostic, ...]
    result: VerifyResult | SimulateResult
    task: str
    text: str | None = None  # the buffer it ran on: maps its line numbers (trace, estimate) onto later edits
    kernels: tuple[str, ...] = ()  # the kernels of the buffer it ran (the code lens marks these); () unknown
    key: tuple[Any, ...] = ()  # the settings it ran under (``server.settings.analysis_key``)
    by: str = ""  # who ran it: "" the editor's own run, "agent" the fix agent's verification of this text

    @property
    def via(self) -> str:
        """What ran: "task", or without one "main" / "test" / "shapes" / "none" (``SimulateResult.via``)."""
        return self.result.via if isinstance(self.result, SimulateResult) else "task"

    @property
    def trace(self) -> list[TraceEntry]:
        return list(self.result.trace)

    @property
    def correct(self) -> bool:
        return isinstance(self.result, VerifyResult) and self.result.correct
