"""The inputs of every view: one document's text and what is known about it, frozen (built by the server
on the event loop from the session, read by the pure view functions)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..cost_view import CostView
from ..model import Diagnostic
from .facts import Facts
from .runs import RunResult

Shapes = Mapping[str, Mapping[str, tuple[int, ...]]]


@dataclass(frozen=True)
class DocumentView:
    """A snapshot of one document for hover, inlay hints and code lens.

    ``runs`` holds only results computed under the current settings (verify / simulate / remote, each of any
    revision: ``revision`` tells whether it is this text's); ``target`` is the one the view speaks of (the last
    local run's, else the one the document is checked against)."""

    text: str
    revision: int
    facts: Facts
    target: str
    runs: Mapping[str, RunResult] = field(default_factory=dict)
    cost: CostView | None = None
    diagnostics: Sequence[Diagnostic] = ()  # what is published for this revision (hover explains them)
    input_shapes: Shapes = field(default_factory=dict)

    @property
    def lines(self) -> list[str]:
        return self.text.split("\n")

    def local_runs(self) -> list[RunResult]:
        return [r for r in self.runs.values() if r.kind != "remote"]
