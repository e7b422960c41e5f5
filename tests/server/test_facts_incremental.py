"""Hover / inlay facts reuse per-chunk parses and per-function facts: the facts after any sequence of edits
must equal the facts of the same text from scratch (cold caches), and equal the facts of a whole-file
``ast.parse`` + abstract interpretation of every kernel (the implementation before the cache)."""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nki_agent.diagnostics.static import module_info, source
from nki_agent.diagnostics.views import facts as facts_mod
from nki_agent.diagnostics.views.facts import Facts, kernels_of, static_facts

ROOT = Path(__file__).resolve().parents[2]
MULTI = ("import numpy as np\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\nN = 256\n\n"
         "def helper(x):\n    return x\n\n"
         "@nki.jit\ndef k1(a):\n    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)\n"
         "    for i in nl.affine_range(N // 64):\n        x = nl.load(a[0:128, 0:512])\n"
         "        y = nl.exp(x)\n    return t\n\n"
         "class Kernels:\n    @nki.jit\n    def method(self, a):\n"
         "        acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)\n"
         "        for j in nl.sequential_range(2, 10, 2):\n            acc2 = nl.zeros((128, 4), nl.float32)\n"
         "        return acc\n\n"
         "@nki.jit\ndef k2(a, b):\n    @nki.jit\n    def inner(c):\n"
         "        return nl.zeros((512, 4), dtype=nl.float32)\n"
         "    out = nl.ndarray((N, 512), dtype=nl.float32, buffer=nl.shared_hbm)\n"
         "    for i in nl.affine_range(4):\n        x = nl.load(a[i * 32:(i + 1) * 32, 0:512])\n"
         "    nl.store(out, nl.load(a))\n    return out\n\n"
         "if True:\n    @nki.jit\n    def k3(a):\n        z = nl.ones((64, 64), nl.bfloat16)\n        return z\n")
BASES = [MULTI] * 4 + [p.read_text() for p in sorted((ROOT / "tests" / "fixtures" / "static").glob("*_bad.py"))[:6]
                       + sorted((ROOT / "examples").glob("*/kernel_*.py"))]
SNIPPETS = ["", " ", "    ", "\n", "(", ")", ":", "#", '"""', "'", "x = (", "pass\n",
            "def g(x):\n    return x\n", "@nki.jit\n", "class A:\n", "if x:\n", "else:\n", "async ",
            "\ndef h(a):\n    t = nl.ndarray((256, 512), dtype=nl.float32, buffer=nl.sbuf)\n    return t\n",
            ("\n@nki.jit\ndef k2(a):\n    t = nl.ndarray((N, 512), dtype=nl.float32, buffer=nl.sbuf)\n"
             "    for i in nl.affine_range(N // 64):\n        u = nl.load(a[0:128, 0:512])\n    return t\n"),
            "    y = nl.load(a[0:256, 0:512])\n", "    for j in nl.affine_range(8):\n        z = nl.exp(y)\n",
            "N = 256\n", "N = 512\n", "import numpy as np\n", "from neuronxcc import nki\n",
            "import nki.language as nl\n", "import neuronxcc.nki.language as nl\n", "@nki.jit(\n)\n",
            "    @nki.jit\n    def inner(b):\n        return nl.zeros((512, 4), dtype=nl.float32)\n"]
SHAPES: list[dict[str, dict[str, tuple[int, ...]]]] = [{}, {"k2": {"a": (128, 512)}}]
TARGETS = ["trn1", "trn2"]
SCALE = 20 if os.environ.get("NKI_FUZZ_FULL") == "1" else 1

# an edit: (where, as a fraction of the text; snap to a line start?; characters deleted; text inserted)
edits = st.tuples(st.floats(0, 1), st.booleans(), st.integers(0, 40), st.sampled_from(SNIPPETS))
# edits that often keep the file valid: a whole line inserted, or a few characters deleted, at a line start
LINES = ["    y = nl.load(a[0:256, 0:512])\n", "    for j in nl.affine_range(8):\n        z = nl.exp(y)\n",
         "N = 512\n", "\n", "    pass\n", "import neuronxcc.nki.language as nl\n", "# note\n"]
line_edits = st.tuples(st.floats(0, 1), st.just(True), st.sampled_from([0, 0, 0, 1, 4]), st.sampled_from(LINES))


def apply(text: str, edit: tuple[float, bool, int, str]) -> str:
    where, line_start, delete, insert = edit
    pos = int(where * len(text))
    if line_start:
        pos = text.rfind("\n", 0, pos) + 1
    return text[:pos] + insert + text[pos + delete:]


def whole_file_facts(text: str, shapes: dict[str, dict[str, tuple[int, ...]]]) -> Facts:
    """The facts as computed before the per-function cache: one ``ast.parse`` of the whole file."""
    out = Facts()
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return out
    lines = text.split("\n")
    info = module_info(module)
    kernels = kernels_of(module, lines)
    out.kernels = [k for _, k in kernels]
    if info.generation:
        for node, kfact in facts_mod.analysed(module, kernels, info.aliases):  # kernels and their NKI helpers
            facts_mod._record(node, kfact, lines, info, shapes, out)
    return out


def parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def cold(text: str, target: str, shapes: dict[str, dict[str, tuple[int, ...]]]) -> Facts:
    facts_mod.clear_cache()
    source.clear_cache()
    return static_facts(text, target, shapes)


def as_tuple(f: Facts) -> tuple[Any, ...]:
    return (f.kernels, f.tensors, f.loops)


# random edits make "1if"-style literals and "\\g"-style escapes, which the parser warns about
@pytest.mark.filterwarnings("ignore::SyntaxWarning", "ignore::DeprecationWarning")
@settings(max_examples=80 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(BASES), st.lists(st.one_of(edits, line_edits, line_edits), min_size=1, max_size=8), st.sampled_from(TARGETS),
       st.sampled_from(range(len(SHAPES))))
def test_facts_after_edits_equal_facts_from_scratch(base: str, steps: list[tuple[float, bool, int, str]],
                                                    target: str, shapes_index: int) -> None:
    shapes = SHAPES[shapes_index]
    text = base
    static_facts(text, target, shapes)  # warm: every function of the file is known
    for step in steps:
        before, text = text, apply(text, step)
        warm = static_facts(text, target, shapes)
        assert as_tuple(warm) == as_tuple(cold(text, target, shapes))
        assert as_tuple(warm) == as_tuple(whole_file_facts(text, shapes))
        static_facts(before, target, shapes)  # re-warm after the cold run: the caches hold both versions
        if not parses(text) and step[2] % 4 != 3:  # mostly undone, as in typing: the next edit is of valid text
            text = before
            assert as_tuple(static_facts(text, target, shapes)) == as_tuple(whole_file_facts(text, shapes))


def test_an_edit_recomputes_only_the_edited_function(monkeypatch: pytest.MonkeyPatch) -> None:
    body = ("@nki.jit\ndef kernel_{k}(a):\n    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)\n"
            "    for i in nl.affine_range(4):\n        x = nl.load(a[0:128, 0:512])\n    return t\n\n")
    text = "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n" + \
        "".join(body.format(k=k) for k in range(10))
    facts_mod.clear_cache()
    before = static_facts(text)
    assert len(before.kernels) == 10 and len(before.loops) == 10
    calls: list[str] = []
    real = facts_mod._unit_piece

    def counting(unit_text: str, *args: Any) -> Any:
        calls.append(unit_text)
        return real(unit_text, *args)

    monkeypatch.setattr(facts_mod, "_unit_piece", counting)
    edited = text.replace("def kernel_3(a):\n", "def kernel_3(a):\n    pass\n")
    after = static_facts(edited)
    assert len(calls) == 1 and "kernel_3" in calls[0]
    assert as_tuple(after) == as_tuple(whole_file_facts(edited, {}))
    assert after.kernels[5].line == before.kernels[5].line + 1  # later functions moved down, from the cache
    calls.clear()
    broken = edited.replace("    pass\n", " pass\n")
    assert as_tuple(static_facts(broken)) == as_tuple(Facts())  # a file that does not parse: no facts
    assert as_tuple(static_facts(edited)) == as_tuple(after) and not calls  # repaired: all from the cache
