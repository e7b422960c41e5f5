"""Module-level edits (a constant, an import, a helper) re-analyse only the functions that read what the
edit changed — and a check after any sequence of them equals a check from scratch.

``check_text`` caches each function's diagnostics with the module-level bindings its analysis read
(``diagnostics/static/reads.py``). These tests pin both sides: a changed constant a kernel uses DOES
change that kernel's diagnostics (a tile size going above 128 partitions), an unrelated edit re-analyses
nothing but the new code, and random module-level edit sequences on kernel files check exactly as a cold
check does.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nki_agent.diagnostics.static import Settings, analyse, check_text, clear_caches, source
from test_static_incremental import BASES, CONFIGS, SCALE

# public-style tiled kernels, written for these tests: module constants, a helper, kernels that read
# some of the constants and one that reads none
TILED = '''"""Tiled element-wise kernels."""
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

TILE_P = 128
TILE_F = 512
N_TILES = 4


def tile_rows(n):
    return n // TILE_P


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray((TILE_P * N_TILES, TILE_F), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(N_TILES):
        x = nl.load(a[i * TILE_P:(i + 1) * TILE_P, 0:TILE_F])
        y = nl.load(b[i * TILE_P:(i + 1) * TILE_P, 0:TILE_F])
        nl.store(out[i * TILE_P:(i + 1) * TILE_P, 0:TILE_F], value=nl.add(x, y))
    return out


@nki.jit
def scale_kernel(a):
    out = nl.ndarray((TILE_P, TILE_F), dtype=nl.float32, buffer=nl.shared_hbm)
    buf = nl.ndarray((TILE_P, TILE_F), dtype=nl.float32, buffer=nl.sbuf)
    buf[...] = nl.multiply(nl.load(a[0:TILE_P, 0:TILE_F]), 2.0)
    nl.store(out, value=buf)
    return out


@nki.jit
def transpose_kernel(a):
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a[0:128, 0:128])
    nl.store(out, value=nisa.nc_transpose(t))
    return out
'''
PARTITION_LIMIT = "err_num_partition_exceed_arch_limit"


def cold(text: str, config: Settings | None = None) -> list:
    clear_caches()
    return check_text("k.py", text, config)


@pytest.fixture()
def analysed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the functions analysed from now on (a result from the cache is not an analysis)."""
    names: list[str] = []
    run = analyse.run
    monkeypatch.setattr(analyse, "run", lambda node, *a: names.append(node.name) or run(node, *a))
    return names


def test_a_changed_tile_constant_changes_the_kernels_that_read_it(analysed: list[str]) -> None:
    clear_caches()
    assert check_text("k.py", TILED) == []
    analysed.clear()
    wide = TILED.replace("TILE_P = 128\n", "TILE_P = 256\n")
    after = check_text("k.py", wide)
    again = list(analysed)
    assert after == cold(wide)
    buf_line = wide.split("\n").index("    buf = nl.ndarray((TILE_P, TILE_F), dtype=nl.float32, buffer=nl.sbuf)") + 1
    assert any(d.code == PARTITION_LIMIT and d.line == buf_line for d in after), after
    assert {"add_kernel", "scale_kernel"} <= set(again), again
    assert "transpose_kernel" not in again, "it reads no constant: its result stays"
    clear_caches()  # and back: the finding goes, from the cache or not
    check_text("k.py", wide)
    assert check_text("k.py", TILED) == []


def test_a_changed_constant_that_is_shadowed_inside_the_kernel_changes_nothing(analysed: list[str]) -> None:
    text = TILED.replace("def scale_kernel(a):\n", "def scale_kernel(a):\n    TILE_P = 128\n")
    clear_caches()
    check_text("k.py", text)
    analysed.clear()
    wide = text.replace("TILE_P = 128\nTILE_F", "TILE_P = 256\nTILE_F")
    after = check_text("k.py", wide)
    assert after == cold(wide)
    assert not any(d.code == PARTITION_LIMIT and "buf" in d.message for d in after)


@pytest.mark.parametrize("edit, new_functions", [
    (("TILE_F = 512\n", "TILE_F = 512\nEXTRA = 7\n"), []),  # a constant nobody reads
    (("N_TILES = 4\n", "N_TILES = 4\nLABEL = 'tiled'\nSEED = 1234\n"), []),
    (("import numpy as np\n", "import numpy as np\nimport math\n"), []),  # an import nobody reads
    (("import numpy as np\n", "import numpy as np\nfrom neuronxcc.nki.language import par_dim\n"), []),
    (("\n\n@nki.jit\ndef scale_kernel", "\n\ndef helper(x):\n    return x + 1\n\n\n@nki.jit\ndef scale_kernel"),
     ["helper"]),  # a helper function: only the helper itself is analysed
    (("\n\n@nki.jit\ndef transpose_kernel", "\n\nGROUP = 2\n\n\n@nki.jit\ndef transpose_kernel"), []),
])
def test_an_unrelated_module_level_edit_reanalyses_only_the_new_code(
        analysed: list[str], edit: tuple[str, str], new_functions: list[str]) -> None:
    clear_caches()
    check_text("k.py", TILED)
    analysed.clear()
    old, new = edit
    assert old in TILED
    edited = TILED.replace(old, new, 1)
    got = check_text("k.py", edited)
    assert analysed == new_functions, analysed
    assert got == cold(edited)


def test_a_declared_target_line_is_read_by_the_kernels_whose_rules_read_it(analysed: list[str]) -> None:
    text = (Path(__file__).resolve().parents[1] / "fixtures" / "static" / "matmul_psum_dtype_bad.py").read_text()
    clear_caches()
    assert [d.code for d in check_text("k.py", text)] == ["sim_unsupported_dtype"]
    trn3 = text.replace('TARGET = "trn1"', 'TARGET = "trn3"')  # bf16 PSUM accumulation is fine on trn3
    assert check_text("k.py", trn3) == [] == cold(trn3)
    check_text("k.py", text)
    analysed.clear()
    labelled = text.replace('TARGET = "trn1"\n', 'TARGET = "trn1"\nLABEL = "x"\n')  # another string line
    assert [d.code for d in check_text("k.py", labelled)] == ["sim_unsupported_dtype"]
    assert "kernel" in analysed and "get_inputs" not in analysed, "only what read the string lines runs again"


def test_an_inserted_line_shifts_later_chunks_without_parsing_them_again(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_caches()
    check_text("k.py", TILED)
    parsed: list[str] = []
    parse = source.parse
    monkeypatch.setattr(source, "parse", lambda t: parsed.append(t) or parse(t))
    edited = TILED.replace("import numpy as np\n", "import numpy as np\n# a comment\nimport math\n", 1)
    check_text("k.py", edited)
    assert len(parsed) == 1 and "import math" in parsed[0], "only the chunk holding the new lines is parsed"
    parsed.clear()
    edited = edited.replace("\n\n@nki.jit\ndef scale_kernel", "\n\nEPS = 1\n\n\n@nki.jit\ndef scale_kernel", 1)
    check_text("k.py", edited)
    assert len(parsed) == 1 and "EPS = 1" in parsed[0] and "def add_kernel" in parsed[0], \
        "the line joins the chunk before it; the chunks after it are not parsed again"


def test_findings_below_an_inserted_line_move_with_it() -> None:
    text = TILED.replace("TILE_P = 128\n", "TILE_P = 256\n")
    clear_caches()
    before = check_text("k.py", text)
    edited = text.replace("import numpy as np\n", "import numpy as np\n# a comment\nimport math\n", 1)
    after = check_text("k.py", edited)
    assert before and [(d.code, d.line + 2, d.column) for d in before] == [(d.code, d.line, d.column) for d in after]
    assert [[(e.line, e.new_text) for f in d.fixes for e in f.edits] for d in after] == \
        [[(e.line + 2, e.new_text) for f in d.fixes for e in f.edits] for d in before]
    assert after == cold(edited)


# -- random module-level edit sequences ----------------------------------------------------------------
LINES = ["TILE_P = 256", "TILE_P = 128", "TILE_P = 64", "TILE_F = 1024", "N_TILES = 3", "EXTRA = 7", "N = 256",
         "TARGET = 'trn3'", "LABEL = 'x'", "import math", "import numpy as np", "import math as TILE_P",
         "import neuronxcc.nki.language as nl", "import nki.language as nl", "import nki.isa as nisa",
         "from neuronxcc.nki.language import par_dim", "from neuronxcc import nki", "import neuronxcc.nki.isa as nl",
         "def helper(x):\n    return x + TILE_P", "def tile_rows(n):\n    return n // 2",
         "def TILE_F():\n    return 1", "class Config:\n    TILE_P = 512",
         ("@nki.jit\ndef extra(a):\n    t = nl.ndarray((N, 512), dtype=nl.float32, buffer=nl.sbuf)\n    return t")]
_INT = re.compile(r"^([A-Za-z_]\w*[ \t]*=[ \t]*)\d+[ \t]*$")
_TOP = re.compile(r"^(?:import|from|[A-Za-z_]\w*[ \t]*=)[^\n]*$")
# an edit: (which column-0 line, as a fraction; kind; what to insert / the new value)
module_edits = st.tuples(st.floats(0, 1), st.sampled_from(["insert", "delete", "value"]), st.sampled_from(LINES),
                         st.sampled_from([1, 16, 128, 129, 256, 512]))


def apply_module_edit(text: str, edit: tuple[float, str, str, int]) -> str:
    where, kind, line, value = edit
    lines = text.split("\n")
    top = [k for k, ln in enumerate(lines) if ln[:1] not in ("", " ", "\t", "#")]
    if kind == "insert" or not top:
        at = top[int(where * len(top)) % len(top)] if top and where < 1 else len(lines)
        return "\n".join(lines[:at] + line.split("\n") + [""] + lines[at:])
    statements = [k for k in top if _TOP.match(lines[k]) and not lines[k].rstrip().endswith(("(", "\\", ","))
                  and (k + 1 == len(lines) or lines[k + 1][:1] not in (" ", "\t"))]
    if kind == "value":
        statements = [k for k in statements if _INT.match(lines[k])]
    if not statements:
        return text
    k = statements[int(where * len(statements)) % len(statements)]
    if kind == "delete":
        return "\n".join(lines[:k] + lines[k + 1:])
    lines[k] = _INT.sub(rf"\g<1>{value}", lines[k])
    return "\n".join(lines)


@pytest.mark.filterwarnings("ignore::SyntaxWarning", "ignore::DeprecationWarning")
@settings(max_examples=60 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([None] * 4 + BASES), st.lists(module_edits, min_size=1, max_size=8), st.sampled_from(CONFIGS))
def test_module_level_edits_check_as_a_cold_check_does(base: Path | None, steps: list[tuple[float, str, str, int]],
                                                       config: Settings) -> None:
    text = TILED if base is None else base.read_text()
    clear_caches()
    check_text("k.py", text, config)  # warm: every chunk and function of the file is known
    seen = [text]
    for step in steps:
        text = apply_module_edit(text, step)
        seen.append(text)
        incremental = check_text("k.py", text, config)
        assert incremental == cold(text, config)
        for earlier in seen:  # the caches now hold many versions of each function: all still exact
            check_text("k.py", earlier, config)
        assert check_text("k.py", text, config) == incremental


def test_the_edit_generator_makes_module_level_edits() -> None:
    """The fuzz above is only worth something if its edits change what kernels read."""
    wide = apply_module_edit(TILED, (0.0, "value", "", 256))
    assert wide != TILED and "= 256" in wide
    inserted = apply_module_edit(TILED, (0.5, "insert", "TILE_P = 256", 0))
    assert inserted.count("TILE_P = ") == 2 and any(d.code == PARTITION_LIMIT for d in cold(inserted))
    assert apply_module_edit(TILED, (0.3, "delete", "", 0)).count("\n") == TILED.count("\n") - 1


def test_every_fact_a_function_analysis_sees_is_part_of_its_cache_key() -> None:
    """The result cache is sound only if everything the analysis reads is keyed: the function's text, the
    settings and API generation (the context key), the recorded bindings and string lines (``reads.py``).
    A new field on the analysis context must be added to one of those before it is added here."""
    import dataclasses

    keyed = {
        "source", "root", "is_kernel", "_parents", "_lines", "_text",  # the function's own text
        "target", "param_shapes", "generation",  # settings and API generation: the context key
        "aliases", "constants", "module_text", "_module_read",  # recorded reads (reads.Recording, text)
        "loops",  # the interpreter's own state
    }
    assert {f.name for f in dataclasses.fields(analyse.FunctionContext)} == keyed
