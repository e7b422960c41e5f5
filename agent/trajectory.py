"""Trajectories: one JSONL file per agent run, every step as it happens (the paper's data flywheel).

Records, in order: ``config`` (backend, model, budgets, task, kernel), ``system`` and ``user`` prompts,
``assistant`` turns (text, tool calls, tokens, cost), ``tool`` results, ``route`` changes, ``verdict``
(verified?, reason, diff, totals) and later ``accepted`` (whether the user applied the edit). Each line
is flushed when written, so a crashed or cancelled run still leaves its steps. ``export-sft`` reads them.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

ENV_DIR = "NKI_AGENT_TRAJECTORY_DIR"


def default_dir() -> str:
    """``$NKI_AGENT_TRAJECTORY_DIR``, else ``$XDG_STATE_HOME/nki-agent/trajectories`` (never the user's project)."""
    if os.environ.get(ENV_DIR):
        return os.environ[ENV_DIR]
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "nki-agent", "trajectories")


class Trajectory:
    """Append-only JSONL writer of one run (``path`` is None when recording is off)."""

    def __init__(self, directory: str | None, kernel_path: str):
        self.run_id = uuid.uuid4().hex[:12]
        self.path: str | None = None
        if directory is not None:
            os.makedirs(directory, exist_ok=True)
            stem = os.path.splitext(os.path.basename(kernel_path))[0] or "kernel"
            self.path = os.path.join(directory, f"{time.strftime('%Y%m%dT%H%M%S')}-{stem}-{self.run_id}.jsonl")
        self.records: list[dict[str, Any]] = []

    def write(self, kind: str, **data: Any) -> None:
        rec = {"type": kind, "run": self.run_id, "t": round(time.time(), 3), **data}
        self.records.append(rec)
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(rec, default=str, ensure_ascii=False) + "\n")


def mark_accepted(path: str, accepted: bool, note: str = "", trusted: bool = True) -> None:
    """Record the user's decision on the run's edit (applied or not); ``trusted``: its verification ran
    in the OS sandbox, or the user passed --trust-local (``AgentResult.trusted``)."""
    run = ""
    for rec in read(path)[:1]:
        run = rec.get("run", "")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": "accepted", "run": run, "t": round(time.time(), 3), "accepted": accepted,
                             "note": note, "trusted": trusted}) + "\n")


def read(path: str) -> list[dict[str, Any]]:
    """The records of one trajectory file; a torn last line (crash mid-write) is skipped."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
    return out
