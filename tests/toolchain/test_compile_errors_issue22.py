"""Compile-time errors the classic front end raises that were reported "correct" before (issue 22, item 2).

Data-driven over ``tests/fixtures/compile_errors/<case>/{kernel,task}.py``: the kernel line that must carry
the error is marked ``# expect: <code>``. Simulator errors (a store into a kernel input, an ``affine_range``
whose iterations provably write the same elements) come out of ``api.verify``, jailed and in process, once,
at that line; the executor raises them from the traced program too. The loop-scope error is syntactic and
comes from the static checker (``diagnostics/static/rules/loop_scope.py``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nki_agent.toolchain import api
from nki_agent.toolchain.facts.errors import NkiError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "compile_errors"
EXPECT = re.compile(r"#\s*expect:\s*([a-z0-9_]+)")
STATIC = {"err_local_variable_used_out_of_scope"}  # syntactic: the static checker's
CASES = sorted(p for p in FIXTURES.iterdir() if (p / "kernel.py").is_file())


def expectation(case: Path) -> tuple[str, int]:
    for lineno, line in enumerate((case / "kernel.py").read_text().splitlines(), start=1):
        m = EXPECT.search(line)
        if m:
            return m.group(1), lineno
    raise AssertionError(f"{case.name} has no '# expect:' marker")


SIM_CASES = [c for c in CASES if expectation(c)[0] not in STATIC]
STATIC_CASES = [c for c in CASES if expectation(c)[0] in STATIC]


def _verify(case: Path, isolate: bool) -> Any:
    return api.verify(str(case / "kernel.py"), str(case / "task.py"), seeds=3, isolate=isolate, timeout=180.0)


def _old_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The behaviour before issue 22: both checks only ever warned."""
    from nki_agent.toolchain.sim import kernel, replay, view

    monkeypatch.setattr(kernel, "returns_outputs", lambda code: False)
    monkeypatch.setattr(replay, "program_returns_outputs", lambda results: False)
    monkeypatch.setattr(view, "proven_overlap", lambda owners, cur: False)


def test_every_case_is_covered() -> None:
    codes = {expectation(c)[0] for c in CASES}
    assert {"err_cannot_update_immutable_parameter", "err_unexpected_output_dependencies",
            "err_local_variable_used_out_of_scope"} <= codes


@pytest.mark.parametrize("case", SIM_CASES, ids=[c.name for c in SIM_CASES])
def test_was_reported_correct_with_only_a_warning(case: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, line = expectation(case)
    _old_rules(monkeypatch)
    res = _verify(case, isolate=False)
    assert res.correct, res.problems
    warned = [p for p in res.problems if p.code == code]
    assert warned and all(p.severity == "warning" for p in warned)


@pytest.mark.parametrize("isolate", [False, True], ids=["in_process", "jailed"])
@pytest.mark.parametrize("case", SIM_CASES, ids=[c.name for c in SIM_CASES])
def test_is_an_error_at_the_line_once(case: Path, isolate: bool) -> None:
    code, line = expectation(case)
    res = _verify(case, isolate)
    assert not res.correct and not res.compiled
    first = res.problems[0]
    assert (first.code, first.severity) == (code, "error"), first.message
    assert first.location is not None and first.location.line == line
    assert first.location.path.endswith("kernel.py")
    assert first.doc_url.startswith("https://")
    assert [p.code for p in res.problems].count(code) == 1  # once, not per seed
    assert not any(p.code == "sim_input_mutated" for p in res.problems)  # the compile-time error comes first


@pytest.mark.parametrize("case", SIM_CASES, ids=[c.name for c in SIM_CASES])
def test_the_executor_raises_it_from_the_program(case: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Traced under the old rules (so the tracer lets it through), the program's replay raises the same error
    at the same line: the check lives in the simulator's semantics, not in the kernel's process."""
    from nki_agent.toolchain.judging import verify as v
    from nki_agent.toolchain.judging.trace_roles import traced
    from nki_agent.toolchain.sim import kernel, view
    from nki_agent.toolchain.tasks import find_kernel, load_module, load_task

    code, line = expectation(case)
    task = load_task(str(case / "task.py"), ())
    kern = find_kernel(load_module(str(case / "kernel.py"), f"issue22_{case.name}", ()), task.kernel_name)
    inputs, _, _ = v.draw(task, 0)
    args = [v._to_np(x) for x in inputs]
    with monkeypatch.context() as m:
        m.setattr(kernel, "returns_outputs", lambda c: False)
        m.setattr(view, "proven_overlap", lambda owners, cur: False)
        program = traced(kern, task, args, len(inputs), None, 60.0)
    with pytest.raises(NkiError) as e:
        program(*[np.array(a, copy=True) for a in args])
    assert e.value.code == code and e.value.severity == "error"
    assert e.value.location is not None and e.value.location.line == line


@pytest.mark.parametrize("case", STATIC_CASES, ids=[c.name for c in STATIC_CASES])
def test_static_error_at_the_line(case: Path) -> None:
    """Simulated, the kernel is right (Python keeps the last iteration's tile): api.verify says correct, jailed
    and in process; the static checker (editor, ``nki-agent check``) reports the compiler's error at the read."""
    from nki_agent.diagnostics.static import check_text

    code, line = expectation(case)
    for isolate in (False, True):
        assert _verify(case, isolate).correct
    path = case / "kernel.py"
    found = [d for d in check_text(str(path), path.read_text()) if d.code == code]
    assert [(d.line, d.severity) for d in found] == [(line, "error")]


SCOPE_OK = '''
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def ok(a):
    out = nl.ndarray((128, 256), dtype=a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((128, 256), dtype=a.dtype, buffer=nl.sbuf)
    y = nl.zeros((128, 256), dtype=a.dtype)
    for t in nl.affine_range(2):
        x = nl.load(a[t * 128:(t + 1) * 128, 0:256])
        buf[...] = x
        y = nl.exp(x)
    for t in nl.affine_range(2):
        z = nl.load(a[0:128, 0:256])
        nl.store(out, z)
    z = nl.load(a[0:128, 0:256])
    nl.store(out, nl.add(z, y))
    for k in nl.static_range(2):
        w = nl.load(a[0:128, 0:256])
    nl.store(out, w)
    return out
'''


def test_no_scope_error_for_names_bound_before_rebound_after_or_unrolled() -> None:
    from nki_agent.diagnostics.static import check_text

    found = [d for d in check_text("scope_ok.py", SCOPE_OK) if d.code == "err_local_variable_used_out_of_scope"]
    assert found == []
