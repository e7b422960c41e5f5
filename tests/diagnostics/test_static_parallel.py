"""Cold checks with the helper process (``diagnostics/static/parallel.py``) equal checks in one process.

The helper only warms caches, so whatever it does (guess the context wrong, die, stall) a check must
give exactly what a check without it gives; and it must really do work, or these tests prove nothing.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nki_agent.diagnostics.static import Settings, check_text, clear_caches, parallel
from test_static_incremental import BASES, CONFIGS, SCALE, apply, edits

ROOT = Path(__file__).resolve().parents[2]
BAD = sorted((ROOT / "tests" / "fixtures" / "static").glob("*_bad.py"))


def big_file(extra: str = "", head: str = "") -> str:
    """Every broken-kernel fixture and example kernel, renamed apart: ~2,000 lines with findings."""
    parts = [head]
    for n, path in enumerate(BAD + sorted((ROOT / "examples").glob("*/kernel_classic.py"))):
        parts.append(path.read_text().replace("def ", f"def f{n}_") + "\n\n")
        if n == len(BAD) // 2:
            parts.append(extra)
    return "".join(parts)


def sequential(text: str, config: Settings | None = None) -> list:
    clear_caches()
    helper = parallel._helper
    parallel._helper = None  # this check alone, in this process
    try:
        return check_text("k.py", text, config)
    finally:
        parallel._helper = helper
        clear_caches()


@pytest.fixture()
def helper() -> Iterator[parallel.Helper]:
    started = parallel.enable()
    if started is None:
        pytest.skip("helper switched off (NKI_AGENT_CHECK_HELPER=0 or one CPU)")
    assert started.wait_ready(60), "the helper process did not start"
    yield started
    parallel.disable()
    clear_caches()


# column-0 text the guessed context gets wrong or that the chunk cutter must see through
TRICKY = {
    "plain": ("", ""),
    "constant after the kernels": ("N_TILE = 256\n\n", ""),
    "import in a docstring": ('"""Usage:\nimport neuronxcc.nki.language as xx\nN_TILE = 64\n"""\n\n', ""),
    "import after the kernels": ("import numpy as np2\n\n", ""),
    "syntax error in one kernel": ("def broken(a:\n    return a\n\n", ""),
    "def inside a string": ('DOC = """\ndef fake(a):\n    return a\n"""\n\n', ""),
    "multi-line decorator": ("@nki.jit(\n    mode='simulation',\n)\ndef decorated(a):\n    return a\n\n", ""),
    "parenthesised import": ("", "from neuronxcc.nki import (\n    language as nl2,\n    isa as nisa2,\n)\n"),
    "classic-on-new target": ("TARGET = 'trn3'\n\n", ""),
}


@pytest.mark.parametrize("name", sorted(TRICKY))
def test_a_cold_check_with_the_helper_equals_one_without(helper: parallel.Helper, name: str) -> None:
    extra, head = TRICKY[name]
    text = big_file(extra, head)
    expected = sequential(text)
    assert any(d.severity == "error" for d in expected), "the file must have findings to compare"
    served = helper.served
    assert check_text("k.py", text) == expected
    assert helper.served > served, "the helper did not take part in the check"
    assert check_text("k.py", text) == expected  # and the caches it warmed hold up


def test_settings_and_input_shapes_reach_the_helper(helper: parallel.Helper) -> None:
    text = big_file()
    for config in CONFIGS + [Settings(input_shapes={"f0_kernel": {"a": (256, 512)}})]:
        expected = sequential(text, config)
        assert check_text("k.py", text, config) == expected


@pytest.mark.filterwarnings("ignore::SyntaxWarning", "ignore::DeprecationWarning")
@settings(max_examples=25 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                      HealthCheck.function_scoped_fixture])
@given(st.sampled_from(BASES), st.lists(edits, min_size=1, max_size=6), st.sampled_from(CONFIGS))
def test_edited_files_check_the_same_with_the_helper(helper: parallel.Helper, monkeypatch: pytest.MonkeyPatch,
                                                     base: Path, steps: list, config: Settings) -> None:
    monkeypatch.setattr(parallel, "MIN_CHARS", 1)  # small files too: every check goes through the helper
    text = base.read_text()
    for step in steps:
        text = apply(text, step)
    expected = sequential(text, config)
    assert check_text("k.py", text, config) == expected


def test_a_helper_that_dies_costs_nothing_but_time(helper: parallel.Helper) -> None:
    text = big_file()
    expected = sequential(text)
    os.kill(helper.proc.pid, signal.SIGKILL)
    helper.proc.wait()
    assert check_text("k.py", text) == expected  # checked here alone
    clear_caches()
    restarted = parallel._helper
    assert restarted is not None and restarted is not helper, "a dead helper is replaced"
    assert restarted.wait_ready(60)
    assert check_text("k.py", text) == expected and restarted.served == 1


def test_a_helper_that_stalls_is_stopped(helper: parallel.Helper, monkeypatch: pytest.MonkeyPatch) -> None:
    text = big_file()
    expected = sequential(text)
    monkeypatch.setattr(parallel, "REPLY_TIMEOUT_S", 0.5)
    os.kill(helper.proc.pid, signal.SIGSTOP)  # alive, but never answers
    try:
        assert check_text("k.py", text) == expected
    finally:
        if helper.alive():
            os.kill(helper.proc.pid, signal.SIGCONT)
    assert not helper.alive(), "a stuck helper must be stopped (a late reply would answer the next request)"


def test_the_helper_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    parallel.disable()
    monkeypatch.setenv(parallel.ENV_SWITCH, "0")
    assert parallel.enable() is None and not parallel.active()


def test_guessed_context_matches_the_real_one_for_every_example() -> None:
    from nki_agent.diagnostics.static import source

    for path in sorted((ROOT / "examples").glob("*/kernel_*.py")) + BAD:
        text = path.read_text()
        guess = parallel.info_of(parallel.guess_ops(text))
        real = source.layout(text).info
        assert (guess.aliases, guess.constants, guess.generation) == \
            (real.aliases, real.constants, real.generation), path.name


def test_an_edit_every_function_depends_on_shares_the_reanalysis_with_the_helper(helper: parallel.Helper) -> None:
    text = big_file()
    check_text("k.py", text)  # every chunk and function known
    # importing the new API too makes the file "mixed": every function's context changes
    edited = text.replace("import numpy as np\n", "import numpy as np\nimport nki.language as nl_new\n", 1)
    assert edited != text
    expected = sequential(edited)
    check_text("k.py", text)
    served = helper.served
    assert check_text("k.py", edited) == expected
    assert helper.served == served + 1, "the re-analysis under the new context did not use the helper"


def test_an_unrelated_import_edit_reanalyses_nothing(helper: parallel.Helper) -> None:
    text = big_file()
    check_text("k.py", text)
    edited = text.replace("import numpy as np\n", "import numpy as np\nimport math as m2\n", 1)
    assert edited != text
    expected = sequential(edited)
    check_text("k.py", text)
    served = helper.served
    assert check_text("k.py", edited) == expected
    assert helper.served == served, "no function reads m2: nothing to re-analyse, nothing to share"
