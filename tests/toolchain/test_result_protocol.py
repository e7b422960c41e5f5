"""The typed result protocol (``toolchain/protocol/jobs.py``) between the jailed workers, the parent and the tools.

- Contract: the plain JSON the real jailed workers write (they do not import pydantic) validates into the
  models, for every op, on example kernels of both API generations — and carries no key the model
  would silently drop (a field added on one side only fails here).
- A worker reply that does not validate is a ``sim_worker_crash`` problem, never an exception.
- Hidden seeds: never revealed (not in the result's JSON, not sent to the kernel's process), and a
  kernel that hard-codes the visible seeds' answers fails on them.
- The first mismatch names the line of the last store into that element; the language server's
  wrong-result diagnostic sits there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from nki_agent.toolchain import api
from nki_agent.toolchain.judging import judge, results
from nki_agent.toolchain.isolation import runner, sandbox
from nki_agent.toolchain.protocol.jobs import (
    ArgSpec,
    CompileResult,
    Location,
    Mismatch,
    OutputSummary,
    ProblemInfo,
    ProfileResult,
    RelatedInfo,
    SeedFigures,
    SimulateResult,
    TaskDescription,
    TraceEntry,
    VerifyResult,
)
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT / "tests" / "fixtures" / "protocol"
KERNELS = [EXAMPLES / e / f"kernel_{g}.py" for e in ("l1_add", "l2_matmul_spmd_grid") for g in ("classic", "new")]
KERNELS.append(EXAMPLES / "l1_gelu" / "kernel_new.py")  # a torch Model task (its workers import torch: slower)
HIDDEN = 1987654321  # the hidden seed these tests draw (secrets.randbelow is pinned to it)


NESTED: dict[type[BaseModel], dict[str, type[BaseModel]]] = {
    SimulateResult: {"outputs": OutputSummary, "inputs": ArgSpec, "trace": TraceEntry, "problems": ProblemInfo},
    VerifyResult: {"seeds": SeedFigures, "trace": TraceEntry, "problems": ProblemInfo},
    TaskDescription: {"inputs": ArgSpec, "problems": ProblemInfo},
    SeedFigures: {"first_mismatch": Mismatch},
    ProblemInfo: {"location": Location, "related": RelatedInfo},
    RelatedInfo: {"location": Location},
}


def _unknown(model: type[BaseModel], data: dict[str, Any]) -> list[str]:
    """Keys of ``data`` (recursively) that ``model`` does not have: they would be dropped silently."""
    out = [k for k in data if k not in model.model_fields]
    for key, sub in NESTED.get(model, {}).items():
        value = data.get(key)
        for item in value if isinstance(value, list) else [value] if isinstance(value, dict) else []:
            out += [f"{key}.{k}" for k in _unknown(sub, item)]
    return out


@pytest.fixture
def pinned_hidden_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results.secrets, "randbelow", lambda bound: HIDDEN)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_workers_json_validates_into_the_models(kernel: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    task = str(kernel.parent / "task.py")
    reply = sandbox.run({"op": "simulate", "kernel": str(kernel), "task": task})
    raw = reply["result"]
    sim = SimulateResult.model_validate(raw)
    assert sim.ran and sim.outputs and sim.trace and sim.inputs, raw.get("problems")
    assert _unknown(SimulateResult, raw) == []
    described = sandbox.run({"op": "describe", "task": task})["result"]
    assert TaskDescription.model_validate(described).inputs
    assert _unknown(TaskDescription, described) == []

    seen: dict[str, Any] = {}
    real = judge._judge

    def spy(body: dict[str, Any], frames: dict[int, Any], *rest: Any) -> Any:
        seen["body"], seen["frames"] = body, frames
        return real(body, frames, *rest)

    monkeypatch.setattr(judge, "_judge", spy)
    res = api.verify(str(kernel), task, seeds=2)
    assert isinstance(res, VerifyResult) and res.correct and res.stage == "correct", res.problems
    claimed = seen["body"]["result"]  # what the kernel role wrote (shown, never believed for the verdict)
    VerifyResult.model_validate(claimed)
    assert _unknown(VerifyResult, claimed) == []
    for header, _ in seen["frames"].values():
        assert all(isinstance(i, int) and isinstance(line, int) and all(len(b) == 2 for b in box)
                   for i, line, box in header["stores"]), header["stores"]
    assert isinstance(api.compile(str(kernel), task), CompileResult)
    prof = api.profile(str(kernel), task, seeds=1)
    assert isinstance(prof, ProfileResult) and prof.correct and prof.latency.kind in ("not measured", "estimated")
    again = VerifyResult.model_validate_json(res.model_dump_json())  # the JSON a tool prints reads back
    assert again == res


def test_in_process_results_are_the_same_models() -> None:
    kernel, task = str(EXAMPLES / "l1_add" / "kernel_new.py"), str(EXAMPLES / "l1_add" / "task.py")
    assert api.verify(kernel, task, seeds=1, isolate=False).sandbox == "in-process"
    assert api.simulate(kernel, task, isolate=False).sandbox == "in-process"
    assert api.describe_task(task, isolate=False).sandbox == "in-process"
    compiled = api.compile(kernel, task, isolate=False)
    assert compiled.compiled and compiled.stage == "compiled" and compiled.sandbox == "in-process"
    assert api.profile(kernel, task, seeds=1, isolate=False).op == "profile"


@pytest.mark.parametrize("body", [
    {"ok": True, "result": {"ran": "perhaps", "outputs": 3}},
    {"ok": True, "result": {"ran": True, "trace": [{"line": "not a line"}]}},
    {"ok": False, "code": "sim_worker_crash", "error": "boom"},
])
def test_a_malformed_worker_reply_is_a_worker_crash(body: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "run", lambda *a, **k: dict(body, sandbox="bwrap", stderr=""))
    local = runner.LocalRunner()
    sim = local.simulate("k.py", "t.py", timeline=True)  # the cost model's one-worker run (api.estimate)
    assert [p.code for p in sim.problems] == ["sim_worker_crash"] and not sim.ran and sim.sandbox == "bwrap"
    desc = local.describe("t.py")
    assert isinstance(desc, TaskDescription) and desc.task == "t.py"
    assert [p.code for p in desc.problems] == ["sim_worker_crash"]


def test_a_malformed_kernel_role_reply_is_a_worker_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    real = sandbox.Worker.result

    def corrupt(self: sandbox.Worker) -> sandbox.Reply:
        reply = real(self)
        if self.job.request.get("op") == "execute" and isinstance(reply.body.get("result"), dict):
            reply.body["result"]["trace"] = [{"line": "not a line", "shape": "round"}]
        return reply

    monkeypatch.setattr(sandbox.Worker, "result", corrupt)
    res = api.verify(str(EXAMPLES / "l1_add" / "kernel_new.py"), str(EXAMPLES / "l1_add" / "task.py"), seeds=1)
    assert isinstance(res, VerifyResult) and not res.correct
    assert [p.code for p in res.problems] == ["sim_worker_crash"] and "trace" in res.problems[0].message


@pytest.mark.usefixtures("pinned_hidden_seed")
@pytest.mark.parametrize("isolate", [True, False], ids=["jailed", "in-process"])
def test_hidden_seeds_are_never_revealed(isolate: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[dict[str, Any]] = []  # to the kernel's process (the tracer) and to the executor
    real = sandbox.Worker.send

    def spy(self: sandbox.Worker, header: dict[str, Any], arrays: Any = ()) -> None:
        if self.job.request.get("op") in ("trace", "execute"):
            sent.append(dict(header, to=self.job.request.get("op")))
        real(self, header, arrays)

    monkeypatch.setattr(sandbox.Worker, "send", spy)
    kernel = str(FIXTURES / "wrong_store_new.py")
    res = api.verify(kernel, kernel, seeds=2, hidden_seeds=1, isolate=isolate)
    assert [s.seed for s in res.seeds] == [0, 1, None] and [s.hidden for s in res.seeds] == [False, False, True]
    hidden = res.seeds[2]
    assert not hidden.correct and hidden.first_mismatch is None and hidden.mismatches > 0
    assert hidden.message == f"a hidden seed fails: {hidden.mismatches} of {hidden.elements} elements differ"
    assert not re.search(rf"\b{HIDDEN}\b", res.model_dump_json()), "the hidden seed's value is in the result"
    assert not re.search(rf"\b{HIDDEN}\b", json.dumps(sent)), "the kernel's process was told the hidden seed"
    if isolate:
        assert [h["seed"] for h in sent if h.get("kind") == "seed"] == [0, 1, 2]  # positions, not values
        assert all(h["to"] == "execute" for h in sent if h.get("kind") == "seed")  # the kernel's process: none


@pytest.mark.usefixtures("pinned_hidden_seed")
@pytest.mark.parametrize("isolate", [True, False], ids=["jailed", "in-process"])
def test_a_kernel_correct_only_on_the_visible_seeds_fails_on_a_hidden_one(isolate: bool) -> None:
    kernel = str(FIXTURES / "visible_seeds_only.py")
    shown = api.verify(kernel, kernel, seeds=2, isolate=isolate)
    assert shown.correct, shown.problems  # the cheat works on what it was shown ...
    res = api.verify(kernel, kernel, seeds=2, hidden_seeds=1, isolate=isolate)
    assert not res.correct and res.stage == "compiled"  # ... and not on a seed it never saw
    assert [(s.hidden, s.correct) for s in res.seeds] == [(False, True), (False, True), (True, False)]
    prof = api.profile(kernel, kernel, seeds=2, hidden_seeds=1, isolate=isolate)
    assert not prof.correct and prof.seeds[-1].hidden


def _marked_line(path: Path) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "# WRONG" in text)


@pytest.mark.parametrize("name", ["wrong_store_new.py", "wrong_store_classic.py"])
@pytest.mark.parametrize("isolate", [True, False], ids=["jailed", "in-process"])
def test_the_first_mismatch_names_the_line_of_the_wrong_store(name: str, isolate: bool) -> None:
    kernel = FIXTURES / name
    res = api.verify(str(kernel), str(kernel), seeds=2, isolate=isolate)
    assert not res.correct and res.compiled and res.seeds
    for s in res.seeds:
        assert s.first_mismatch is not None and s.first_mismatch.line == _marked_line(kernel), s


def test_a_mismatch_with_no_known_store_has_no_line(tmp_path: Path) -> None:
    """l1_add with nl.subtract: the mismatch is written by the one store of the loop, whose line is known;
    a kernel that returns its output reshaped cannot be located and says nothing rather than guess."""
    src = (EXAMPLES / "l1_add" / "kernel_new.py").read_text().replace("op=nl.add", "op=nl.subtract")
    store = next(i for i, t in enumerate(src.splitlines(), 1) if "dma_copy(dst=out" in t)
    kernel = tmp_path / "kernel.py"
    kernel.write_text(src)
    res = api.verify(str(kernel), str(EXAMPLES / "l1_add" / "task.py"), seeds=1, isolate=False)
    assert res.seeds[0].first_mismatch is not None and res.seeds[0].first_mismatch.line == store
    kernel.write_text(src.replace("    return out\n", "    return out.reshape((n_rows * n_cols,))\n"))
    task = tmp_path / "task.py"
    task.write_text((EXAMPLES / "l1_add" / "task.py").read_text().replace("return a + b", "return (a + b).reshape(-1)"))
    res = api.verify(str(kernel), str(task), seeds=1, isolate=False)
    assert not res.correct and res.seeds[0].first_mismatch is not None
    assert res.seeds[0].first_mismatch.line is None


def test_the_servers_wrong_result_diagnostic_sits_on_the_wrong_store(tmp_path: Path) -> None:
    from nki_agent.server import analysis
    from nki_agent.server.documents import Snapshot
    from nki_agent.server.settings import ServerSettings
    from nki_agent.server.tasks import SELF, TaskRef

    src = FIXTURES / "wrong_store_new.py"
    path = tmp_path / "kernel.py"
    path.write_text(src.read_text())
    snap = Snapshot(path.as_uri(), 1, src.read_text(), 1)
    run = analysis.run("verify", snap, TaskRef(SELF, "self"), ServerSettings())
    assert isinstance(run.result, VerifyResult) and not run.correct
    (d,) = run.diagnostics
    assert d.code == analysis.WRONG_RESULT and d.line == _marked_line(src) == d.end_line
    assert "first at output 0" in d.message
    plain = src.read_text().replace("  # WRONG: a instead of a + b", "").replace("out[r0 + 5:r0 + 6, :]", "out")
    unknown = analysis.wrong_result(run.result.model_copy(update={"seeds": []}), Snapshot(snap.uri, 2, plain, 2),
                                    analysis.VERIFY_SOURCE)
    assert unknown.line == analysis._kernel_line(plain)  # no known store: the kernel's def line, as before
