"""Simulator semantic bugs of issue 22, one reproduction each (``tests/fixtures/semantics/<case>/``).

Each case is a kernel file and its task. The kernel's first lines say what it must give: ``# expect:
correct`` (the default) or ``# expect: <error id>``. Every case runs three ways that must agree: a
direct simulation in this process (``verify.verify_files``: the kernel itself launched on each seed),
the traced path in this process (``api.verify(isolate=False)``: traced on placeholders, the program
replayed per seed) and the jailed traced path (``api.verify``: tracer and executor in separate workers).
The rules each case pins are in docs/toolchain.md ("Issue 22 semantics").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from nki_agent.toolchain import api
from nki_agent.toolchain.judging import verify as v

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "semantics"
CASES = sorted(p.name for p in ROOT.iterdir() if (p / "kernel.py").is_file())
PATHS = ["direct", "traced-in-process", "traced-jailed"]


def expectation(case: str) -> str:
    m = re.search(r"^# expect: (\S+)", (ROOT / case / "kernel.py").read_text(), re.M)
    return m.group(1) if m else "correct"


def run(case: str, path: str) -> tuple[bool, list[str], str]:
    kernel, task = str(ROOT / case / "kernel.py"), str(ROOT / case / "task.py")
    res: Any
    if path == "direct":
        res = v.verify_files(kernel, task, seeds=2)
        return res.correct, [p.code for p in res.problems if p.severity == "error"], str(
            [p.message for p in res.problems] + [s.message for s in res.seeds])
    res = api.verify(kernel, task, seeds=2, isolate=path != "traced-jailed")
    return res.correct, [p.code for p in res.problems if p.severity == "error"], str(
        [p.message for p in res.problems] + [s.message for s in res.seeds])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", CASES)
def test_issue22_semantics(case: str, path: str) -> None:
    want = expectation(case)
    correct, errors, messages = run(case, path)
    if want == "correct":
        assert correct and not errors, messages
    else:
        assert not correct and want in errors, messages
