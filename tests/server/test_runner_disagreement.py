"""``sim_runner_disagrees``: the local verification and the runner's reached different verdicts for the same
revision — a warning at the kernel's def; none when they agree, when either did not run, or across revisions."""

from __future__ import annotations

import pytest

from nki_agent.server.analysis import DISAGREE, RunResult, disagreement
from nki_agent.server.documents import Snapshot
from nki_agent.toolchain.protocol.jobs import ProfileResult, SimulateResult, VerifyResult

TEXT = "import neuronxcc.nki as nki\n\n\n@nki.jit\ndef k(a):\n    return a\n"
SNAP = Snapshot("file:///w/k.py", 1, TEXT, 3)


def _run(kind: str, res, revision: int = 3) -> RunResult:
    return RunResult(kind, revision, 1, (), res, "task.py")


@pytest.mark.parametrize(("local", "remote", "expected"), [
    (VerifyResult(compiled=True, correct=True), ProfileResult(compiled=True, correct=False, backend="neuron"), True),
    (VerifyResult(compiled=True, correct=False), ProfileResult(compiled=True, correct=True, backend="neuron"), True),
    (VerifyResult(compiled=True, correct=True), ProfileResult(compiled=True, correct=True), False),
    (VerifyResult(compiled=False), ProfileResult(compiled=True, correct=True), False),
    (SimulateResult(ran=True), ProfileResult(compiled=True, correct=False), False),
])
def test_a_disagreement_is_flagged_only_when_both_verified(local, remote, expected):
    d = disagreement(_run("verify", local), _run("remote", remote), SNAP, "http://127.0.0.1:1")
    assert (d is not None) is expected
    if d is not None:
        assert d.code == DISAGREE and d.severity == "warning" and d.line == 5
        assert "http://127.0.0.1:1" in d.message and d.doc_url.startswith("https://")


def test_results_of_different_revisions_are_not_compared():
    local = _run("verify", VerifyResult(compiled=True, correct=True), revision=2)
    remote = _run("remote", ProfileResult(compiled=True, correct=False), revision=3)
    assert disagreement(local, remote, SNAP, "u") is None
