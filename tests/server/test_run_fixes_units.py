"""``server/run_fixes.py`` without a client: a run-tier candidate is kept only when the sandboxed re-run of
the fixed buffer no longer has the problem and has nothing new."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest
from nki_agent.diagnostics.model import Fix, TextEdit
from nki_agent.server import analysis, run_fixes
from nki_agent.server.documents import Snapshot
from nki_agent.server.settings import DEFAULTS
from nki_agent.server.tasks import SELF, TaskRef

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sim_fixes" / "affine_carried.py"


@pytest.fixture()
def broken(tmp_path: Path) -> tuple[Snapshot, analysis.RunResult]:
    path = tmp_path / FIXTURE.name
    path.write_text(FIXTURE.read_text())
    snap = Snapshot(path.as_uri(), 1, path.read_text(), 1)
    run = analysis.run("simulate", snap, TaskRef(SELF, "self"), DEFAULTS)
    assert [d.code for d in run.diagnostics] == ["err_unexpected_output_dependencies"]
    return snap, run


def _rerun(s: Snapshot) -> analysis.RunResult:
    return analysis.run("simulate", s, TaskRef(SELF, "self"), DEFAULTS)


def test_the_repairing_fix_is_kept(broken: tuple[Snapshot, analysis.RunResult]) -> None:
    snap, run = broken
    (fix,) = run_fixes.verified_run_fixes(run, 0, snap, _rerun, analysis.check_settings(DEFAULTS))
    assert "sequential_range" in fix.title


def test_a_candidate_that_does_not_repair_the_run_is_dropped(broken: tuple[Snapshot, analysis.RunResult],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    snap, run = broken
    no_op = Fix("a comment", (TextEdit(1, 1, 1, 1, "# nothing\n"),))
    new_problem = Fix("break the store", (TextEdit(*_span(snap.text, "nl.store(out, acc)"), "nl.store(acc, out)"),))
    monkeypatch.setattr(run_fixes, "fixes_for", lambda d, text, path: [no_op, new_problem])
    assert run_fixes.verified_run_fixes(run, 0, snap, _rerun, analysis.check_settings(DEFAULTS)) == []


def test_a_stopped_computation_offers_nothing(broken: tuple[Snapshot, analysis.RunResult]) -> None:
    snap, run = broken
    stop = threading.Event()
    stop.set()
    assert run_fixes.verified_run_fixes(run, 0, snap, _rerun, analysis.check_settings(DEFAULTS), stop) == []


def test_a_run_of_another_revision_has_no_fixes(broken: tuple[Snapshot, analysis.RunResult]) -> None:
    snap, run = broken

    class _State:  # the two fields run_of reads
        docs = {snap.uri: type("D", (), {"runs": {"simulate": run}})()}

    assert run_fixes.run_of(_State(), snap, "simulate") is run  # type: ignore[arg-type]
    assert run_fixes.run_of(_State(), replace(snap, revision=2), "simulate") is None  # type: ignore[arg-type]


def _span(text: str, needle: str) -> tuple[int, int, int, int]:
    offset = text.index(needle)
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col, line, col + len(needle)
