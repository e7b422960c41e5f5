"""The as-you-type checker reuses per-chunk parses and per-function results: a check after any sequence of
edits must equal a check of the same text from scratch, and a file cut into chunks must be seen exactly
as a whole-file ``ast.parse`` sees it (same validity, same functions, same imports and constants)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nki_agent.diagnostics import static
from nki_agent.diagnostics.static import analyse
from nki_agent.diagnostics.static import Settings, check_text, clear_caches, source

ROOT = Path(__file__).resolve().parents[2]
BASES = sorted((ROOT / "tests" / "fixtures" / "static").glob("*_bad.py")) + \
    sorted((ROOT / "examples").glob("*/kernel_*.py"))[:4]
SNIPPETS = ["", " ", "    ", "\n", "(", ")", "[", "]", ":", "#", "\\", '"""', "'''", "'", '"', "x = (", "pass\n",
            "def g(x):\n    return x\n", "@nki.jit\n", "class A:\n", "if x:\n", "else:\n", "async ",
            "\ndef h(a):\n    t = nl.ndarray((256, 512), dtype=nl.float32, buffer=nl.sbuf)\n    return t\n",
            "    y = nl.load(a[0:256, 0:512])\n", "N = 256\n", "TARGET = 'trn3'\n", "import numpy as np\n",
            "from neuronxcc import nki\n", "import nki.language as nl\n", '"""doc\ndef k():\n"""\n', "@nki.jit(\n)\n",
            "    def inner(b):\n        return nl.zeros((512, 4), dtype=nl.float32)\n"]
CONFIGS = [Settings(), Settings(target="trn2", sdk_generation="new")]
SCALE = 20 if os.environ.get("NKI_FUZZ_FULL") == "1" else 1  # NKI_FUZZ_FULL=1: the long hunt

# an edit: (where, as a fraction of the text; snap to a line start?; characters deleted; text inserted)
edits = st.tuples(st.floats(0, 1), st.booleans(), st.integers(0, 40), st.sampled_from(SNIPPETS))


def apply(text: str, edit: tuple[float, bool, int, str]) -> str:
    where, line_start, delete, insert = edit
    pos = int(where * len(text))
    if line_start:
        pos = text.rfind("\n", 0, pos) + 1
    return text[:pos] + insert + text[pos + delete:]


def parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


# random edits make "1if"-style literals and "\\g"-style escapes, which the parser warns about
@pytest.mark.filterwarnings("ignore::SyntaxWarning", "ignore::DeprecationWarning")
@settings(max_examples=60 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(BASES), st.lists(edits, min_size=1, max_size=8), st.sampled_from(CONFIGS))
def test_check_after_edits_equals_check_from_scratch(base: Path, steps: list[tuple[float, bool, int, str]],
                                                     config: Settings) -> None:
    text = base.read_text()
    check_text("k.py", text, config)  # warm: every chunk and function of the file is known
    for step in steps:
        text = apply(text, step)
        warm = check_text("k.py", text, config)
        clear_caches()
        assert check_text("k.py", text, config) == warm


@pytest.mark.filterwarnings("ignore::SyntaxWarning", "ignore::DeprecationWarning")
@settings(max_examples=80 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(BASES), st.lists(edits, min_size=1, max_size=4))
def test_chunks_see_what_a_whole_file_parse_sees(base: Path, steps: list[tuple[float, bool, int, str]]) -> None:
    text = base.read_text()
    for step in steps:
        text = apply(text, step)
    clear_caches()
    found = source.layout(text)
    module = source.parse(text)
    assert found.valid == (module is not None) == parses(text)
    if module is None:
        return
    info = static.module_info(module)
    assert (found.info.aliases, found.info.constants, found.info.generation) == \
        (info.aliases, info.constants, info.generation)
    lines = text.split("\n")
    whole = [("\n".join(lines[source.first_line(fn) - 1: fn.end_lineno]), source.first_line(fn))
             for fn in source.functions_of(module)]
    assert [(u.text, u.start_line) for u in found.units] == whole
    # a function's parse reused from its chunk is the parse of the function's own text
    for unit in found.units:
        if unit.node is not None:
            alone = source.parse(unit.text)
            assert alone is not None and ast.dump(alone.body[0], include_attributes=True) == \
                ast.dump(unit.node, include_attributes=True)


def test_a_def_line_inside_a_string_is_not_a_cut() -> None:
    text = ('import neuronxcc.nki.language as nl\n"""Docs.\n\ndef not_code(a):\n    x = nl.ndarray((256, 4), '
            'dtype=nl.float32, buffer=nl.sbuf)\n"""\n\n\ndef real(a):\n    return a\n')
    found = source.layout(text)
    assert found.valid and [u.start_line for u in found.units] == [9]
    assert check_text("k.py", text) == []
    broken = text + "\ndef typing(x:\n"  # the file no longer parses: the string still is not code
    assert [u.start_line for u in source.layout(broken).units] == [9]
    assert check_text("k.py", broken) == []


def test_a_multi_line_decorator_stays_with_its_function() -> None:
    text = "import neuronxcc.nki as nki\n@nki.jit(\n    mode='x',\n)\ndef k(a):\n    return a\n"
    found = source.layout(text)
    assert found.valid and [(u.start_line, u.text.count("\n")) for u in found.units] == [(2, 4)]


def test_ends_in_string() -> None:
    assert source.ends_in_string('x = """\nabc\n')
    assert source.ends_in_string("x = 'abc\\\n")
    assert not source.ends_in_string("x = 'abc\ny = 1\n")  # a one-quote string ends at the line (an error)
    assert not source.ends_in_string('x = """a""" # """\n')
    assert not source.ends_in_string("x = r'\\'' + '''a''''\n")


def test_an_edit_reanalyses_only_the_edited_function(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = (ROOT / "tests" / "fixtures" / "static" / "partition_limit_bad.py").read_text()
    head, tail = kernel.split("\n\n\n", 1)
    text = head + "\n\n\n" + "\n\n".join(tail.replace("def kernel", f"def kernel{k}") for k in range(5))
    clear_caches()
    before = check_text("k.py", text)
    assert len(before) == 5
    analysed: list[str] = []
    run = analyse.run
    monkeypatch.setattr(analyse, "run", lambda node, *a: analysed.append(node.name) or run(node, *a))
    edited = text.replace("def kernel2(a):\n", "def kernel2(a):\n    x = 1\n")
    after = check_text("k.py", edited)
    assert analysed == ["kernel2"] and len(after) == 5
    analysed.clear()  # a syntax error in kernel3: nothing else is analysed again, its diagnostic goes
    broken = edited.replace("def kernel3(a):", "def kernel3(a:")
    assert len(check_text("k.py", broken)) == 4 and analysed == []


WIDE = '''import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

N = 512


@nki.jit
def wide(a):
    out = nl.ndarray((256, N), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a[0:256, 0:N])
    nl.store(out[0:256, 0:N], value=nl.exp(t))
    return out
'''


@pytest.mark.parametrize(("added", "analysed_again"), [
    ("EXTRA = 7\n", False),  # unrelated: the split fix of `wide` read neither
    ("import json as json_1\n", False),
    ("i = 3\n", True),  # the fix's loop variable would shadow it: the fix names it i2
    ("N = 1024\n", True),  # a constant the kernel reads, rebound
    ("import numpy as nl\n", True),  # the alias the kernel and its fix use, rebound
])
def test_a_kernel_with_a_fix_is_analysed_again_only_for_a_name_its_fix_or_checks_read(
        added: str, analysed_again: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    clear_caches()
    before = check_text("k.py", WIDE)
    assert [d.code for d in before] == ["err_num_partition_exceed_arch_limit"] and before[0].fixes
    analysed: list[str] = []
    run = analyse.run
    monkeypatch.setattr(analyse, "run", lambda node, *a: analysed.append(node.name) or run(node, *a))
    edited = WIDE.replace("N = 512\n", "N = 512\n" + added)
    after = check_text("k.py", edited)
    assert analysed == (["wide"] if analysed_again else [])
    clear_caches()
    assert check_text("k.py", edited) == after  # reused or not, what a check from scratch gives
    if added.startswith("i ="):
        assert "for i2 in" in after[0].fixes[0].edits[0].new_text
