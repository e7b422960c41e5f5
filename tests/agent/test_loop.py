"""The compile → verify → fix loop end to end on the embedded toolchain (offline backends)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from agent_scripted import Scripted, call, say
from nki_agent.agent.backends.rules_backend import RulesBackend
from nki_agent.agent.loop import AgentConfig, Event, run_agent
from nki_agent.agent.protocol import BackendError, Usage
from nki_agent.agent.router import Router
from nki_agent.agent.snapshot import Snapshot
from nki_agent.agent.trajectory import read
from nki_agent.toolchain import api

ROOT = Path(__file__).resolve().parents[2]
QUICKFIX = sorted((ROOT / "tests" / "fixtures" / "quickfix").glob("*.py"))
ADD = ROOT / "examples" / "l1_add"
GOOD = (ADD / "kernel_new.py").read_text()
BUG = GOOD.replace("op=nl.add", "op=nl.subtract")  # compiles, wrong result: no rule can fix it
FIX = {"old": "op=nl.subtract", "new": "op=nl.add"}


def _cfg(tmp_path: Path, **kw: object) -> AgentConfig:
    return AgentConfig(trajectory_dir=str(tmp_path / "traj"), **kw)  # type: ignore[arg-type]


def _run(tmp_path: Path, text: str, backend: object, **kw: object):  # type: ignore[no-untyped-def]
    cfg_kw = {k: v for k, v in kw.items() if k in AgentConfig.__dataclass_fields__}
    rest = {k: v for k, v in kw.items() if k not in cfg_kw}
    kernel = tmp_path / "kernel.py"
    kernel.write_text(text)
    return run_agent(Snapshot(kernel.as_uri(), 1, text), str(kernel), str(ADD / "task.py"), backend,  # type: ignore[arg-type]
                     _cfg(tmp_path, **cfg_kw), **rest)


def _verifies(tmp_path: Path, text: str, task: str) -> bool:
    p = tmp_path / "check_kernel.py"
    p.write_text(text)
    return api.verify(str(p), task if task != "<self>" else str(p), seeds=2).correct


@pytest.mark.parametrize("fixture", QUICKFIX, ids=[p.stem for p in QUICKFIX])
def test_rules_backend_repairs_broken_kernels(fixture: Path, tmp_path: Path) -> None:
    text = fixture.read_text()
    res = run_agent(Snapshot(fixture.as_uri(), 3, text), str(fixture), str(fixture), RulesBackend(),
                    _cfg(tmp_path), self_task=True)
    assert res.verdict == "verified", res.summary()
    assert res.edit is not None and res.edit.apply(text) == res.final_text != text
    assert _verifies(tmp_path, res.final_text, "<self>")
    assert fixture.read_text() == text  # the user's file is never written


def test_correct_kernel_needs_no_model(tmp_path: Path) -> None:
    model = Scripted([say("should not be asked")])
    res = _run(tmp_path, GOOD, model)
    assert res.verdict == "already_correct" and res.edit is None and model.requests == []


def test_multi_turn_tool_use_until_the_first_verified_kernel(tmp_path: Path) -> None:
    model = Scripted([call("compile", code="def broken(:\n"), call("lookup", query="err_unsupported_memory"),
                      call("verify", edits=[FIX]), call("compile", code=BUG), call("verify", edits=[FIX]),
                      call("verify", code="never reached")])
    events: list[Event] = []
    res = _run(tmp_path, BUG, model, on_event=events.append)
    assert res.verdict == "verified" and res.turns == 5 == len(model.requests)
    assert res.final_text == GOOD and res.edit is not None and res.edit.apply(BUG) == GOOD
    first = model.requests[0]
    assert "shape (2112, 1024) (rank 2), dtype float32" in first.system  # rank-aware prompt from the real inputs
    assert "WRONG RESULT" in first.messages[0].text
    syntax = model.requests[1].messages[-1].tool_results[0]
    assert "sim_syntax_error" in syntax.content or "SyntaxError" in syntax.content
    assert "err_unsupported_memory" in model.requests[2].messages[-1].tool_results[0].content
    stale = model.requests[3].messages[-1].tool_results[0]  # edits apply to the candidate, now the broken file
    assert stale.is_error and "occurs 0 times" in stale.content
    kinds = [e.kind for e in events]
    assert kinds[0] == "start" and kinds[-1] == "done" and "tool" in kinds and "turn" in kinds
    records = read(res.trajectory)  # type: ignore[arg-type]
    types = [r["type"] for r in records]
    assert types[:2] == ["config", "tool"] and types[-1] == "verdict" and types.count("assistant") == 5
    assert records[-1]["verdict"] == "verified" and "+" in records[-1]["diff"]


def test_garbage_model_runs_out_of_turns(tmp_path: Path) -> None:
    model = Scripted([call("verify", code="\x00garbage ((((")])
    res = _run(tmp_path, BUG, model, max_turns=3)
    assert res.verdict == "budget" and "turn budget" in res.reason and res.turns == 3 and res.edit is None


@pytest.mark.parametrize(("usage", "limit", "spent"), [
    (Usage(300_000, 200_000), {"max_tokens": 400_000}, "token budget"),
    (Usage(100_000, 0), {"max_dollars": 1.0}, "cost budget"),  # unknown model: priced at the dearest row
])
def test_token_and_dollar_budgets(tmp_path: Path, usage: Usage, limit: dict, spent: str) -> None:
    model = Scripted([call("verify", usage=usage, code="x = 1\n")], model="claude-opus-4-1")
    res = _run(tmp_path, BUG, model, **limit)
    assert res.verdict == "budget" and spent in res.reason and res.turns == 1


def test_cancel_stops_the_run(tmp_path: Path) -> None:
    cancel = threading.Event()

    def on_event(e: Event) -> None:
        if e.kind == "turn":
            cancel.set()

    model = Scripted([call("verify", edits=[FIX])])
    res = _run(tmp_path, BUG, model, cancel=cancel, on_event=on_event)
    assert res.verdict == "cancelled" and res.edit is None


@pytest.mark.parametrize("cheat", [
    "import numpy as np\nnp.isclose = lambda *a, **k: np.True_\n",
    "import task\ntask.reference = lambda a, b: a - b\n",
    "import os\nos.remove('task.py')\n",
    "open(__file__.replace('kernel', 'task'), 'w').write('')\n",
    "import numpy as np\n_m = np; _m.isclose = lambda a, b, **k: np.ones(np.shape(a), dtype=bool)\n",
    "import numpy as np\n_s = setattr; _s(np, 'isclose', lambda a, b, **k: np.ones(np.shape(a), dtype=bool))\n",
    "_e = exec; _e('import numpy\\nnumpy.isclose = lambda a, b, **k: numpy.ones(numpy.shape(a), dtype=bool)')\n",
    "[exec][0]('import numpy')\n",
    "import numpy as np\nfor _m in (np,): _m.isclose = lambda a, b, **k: np.ones(np.shape(a), dtype=bool)\n",
    "import numpy as np\ndef _p(m=np):\n    m.isclose = None\n_p()\n",
    "_v = eval; _v(\"__import__('os').system('true')\")\n",
    "import numpy as np\nnp.frombuffer(b'# x', np.uint8).tofile('kernel.py')\n",
    "import numpy as np\nf = getattr(np, 'sa' + 've')\n",
    "from numpy import *\n",
])
def test_a_model_that_tampers_with_the_task_is_refused(tmp_path: Path, cheat: str) -> None:
    task_before = (ADD / "task.py").read_text()
    model = Scripted([call("verify", code=cheat + BUG)])
    res = _run(tmp_path, BUG, model, max_turns=2)
    assert res.verdict == "budget"
    answer = model.requests[1].messages[-1].tool_results[0]
    assert answer.is_error and answer.content.startswith("refused")
    assert (ADD / "task.py").read_text() == task_before


def test_arguments_that_steer_verification_are_ignored(tmp_path: Path) -> None:
    model = Scripted([call("verify", edits=[FIX], task="other.py", tolerance={"atol": 1e9}, seeds=1)])
    res = _run(tmp_path, BUG, model)
    assert res.verdict == "verified"
    assert res.verify is not None and len(res.verify.seeds) == 3


def test_self_task_file_keeps_the_original_reference(tmp_path: Path) -> None:
    fixture = ROOT / "tests" / "fixtures" / "quickfix" / "bool_and.py"
    text = fixture.read_text()
    cheat = text.replace("m = hi and lo", "m = hi & lo").replace("return a * ((a > 0.5) & (a < 0.9))", "return a")
    model = Scripted([call("verify", code=cheat.replace("nl.multiply(x, m)", "x"))])
    res = run_agent(Snapshot("file:///k.py", 1, text), str(fixture), str(fixture), model, _cfg(tmp_path, max_turns=2),
                    self_task=True)
    assert res.verdict == "budget"
    answer = model.requests[1].messages[-1].tool_results[0]
    assert answer.is_error and "changes the task definition `reference`" in answer.content


def test_code_block_answer_is_verified(tmp_path: Path) -> None:
    model = Scripted([say(f"Here is the fix:\n```python\n{GOOD}```\n")])
    res = _run(tmp_path, BUG, model)
    assert res.verdict == "verified" and res.final_text == GOOD


def test_router_escalates_from_rules_to_a_model(tmp_path: Path) -> None:
    model = Scripted([call("verify", edits=[FIX])])
    res = _run(tmp_path, BUG, Router([RulesBackend(), model]))
    assert res.verdict == "verified" and len(res.routes) == 1
    assert res.routes[0].startswith("rules → scripted:scripted-1: gave up: No deterministic fix applies to")


def test_backend_errors_escalate_or_end_the_run(tmp_path: Path) -> None:
    broken = Scripted([BackendError("auth", "no API key")], name="anthropic", model="claude-sonnet-4-5")
    res = _run(tmp_path, BUG, broken)
    assert res.verdict == "error" and "no API key" in res.reason
    res = _run(tmp_path, BUG, Router([broken, Scripted([call("verify", edits=[FIX])])]))
    assert res.verdict == "verified" and "auth error" in res.routes[0]


def test_a_model_that_only_talks_is_nudged_once_then_stops(tmp_path: Path) -> None:
    model = Scripted([say("I think it is fine.")])
    res = _run(tmp_path, BUG, model)
    assert res.verdict == "unverified" and len(model.requests) == 2
    assert "did not call a tool" in model.requests[1].messages[-1].text


def test_migration_on_a_new_only_sdk(tmp_path: Path) -> None:
    fixture = ROOT / "tests" / "fixtures" / "sim_fixes" / "classic_elementwise.py"
    classic = fixture.read_text()
    res = run_agent(Snapshot(fixture.as_uri(), 1, classic), str(fixture), str(fixture), RulesBackend(),
                    _cfg(tmp_path, sdk_generation="new"), self_task=True)
    assert res.verdict == "verified", res.summary()
    assert "import nki" in res.final_text and "neuronxcc" not in res.final_text


def test_trajectory_lines_are_json(tmp_path: Path) -> None:
    res = _run(tmp_path, BUG, Scripted([call("verify", edits=[FIX])]))
    lines = Path(res.trajectory).read_text().splitlines()  # type: ignore[arg-type]
    assert all(json.loads(x)["run"] for x in lines)


class _BrokenProfiler:
    def profile(self, kernel_path: str, task_path: str, target: str | None) -> str:
        raise ConnectionError("runner unreachable")


def test_a_failing_tool_is_an_error_result_not_a_crash(tmp_path: Path) -> None:
    model = Scripted([call("profile"), call("verify", edits=[FIX])])
    res = _run(tmp_path, BUG, model, profiler=_BrokenProfiler())
    assert res.verdict == "verified"
    answer = model.requests[1].messages[-1].tool_results[0]
    assert answer.is_error and "ConnectionError: runner unreachable" in answer.content


def test_a_runaway_reply_is_capped_and_the_router_hears_it_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nki_agent.agent import loop
    from nki_agent.agent.protocol import ModelReply, ToolCall

    # the cap as a smaller number (each call that runs is a jailed verification): 8 of 12 -> 4 of 8
    monkeypatch.setattr(loop, "MAX_CALLS_PER_TURN", 4)
    many = ModelReply("", [ToolCall(f"v{k}", "verify", {"code": BUG}) for k in range(8)], "tool_use", Usage(1, 1), "m")
    first, second = Scripted([many], name="a", model="a"), Scripted([call("verify", edits=[FIX])], name="b", model="b")
    third = Scripted([say("never")], name="c", model="c")
    res = _run(tmp_path, BUG, Router([first, second, third]), max_turns=4)
    assert res.verdict == "verified" and third.requests == []
    results = second.requests[0].messages[-1].tool_results
    assert len(results) == 8 and sum(r.content.startswith("not run: at most 4") for r in results) == 4


def test_nudge_and_implicit_verify_are_recorded_for_sft(tmp_path: Path) -> None:
    from nki_agent.agent.sft import example
    from nki_agent.agent.trajectory import mark_accepted

    model = Scripted([say("Thinking."), say(f"```python\n{GOOD}```")])
    res = _run(tmp_path, BUG, model)
    assert res.verdict == "verified" and res.trajectory
    mark_accepted(res.trajectory, True)
    ex = example(read(res.trajectory))
    assert ex is not None
    roles = [m["role"] for m in ex["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
