"""Each static rule: a positive fixture (code at the marked line) and a negative one (no diagnostic)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nki_agent.diagnostics.static import check_text, rules

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "static"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXPECT = re.compile(r"#\s*expect:\s*([a-z0-9_]+)")
BAD = sorted(FIXTURES.glob("*_bad.py"))
GOOD = sorted(FIXTURES.glob("*_good.py"))


def expectations(path: Path) -> list[tuple[str, int]]:
    return [(m.group(1), n) for n, line in enumerate(path.read_text().splitlines(), 1)
            if (m := EXPECT.search(line))]


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_rule_fires_at_marked_line(path: Path) -> None:
    got = [(d.code, d.line) for d in check_text(str(path), path.read_text())]
    assert got == expectations(path)


@pytest.mark.parametrize("path", GOOD, ids=[p.stem for p in GOOD])
def test_rule_is_silent_on_valid_code(path: Path) -> None:
    assert check_text(str(path), path.read_text()) == []


def test_every_rule_has_both_fixtures() -> None:
    names = {r.__name__.rsplit(".", 1)[-1] for r in rules.ALL}
    assert names == {p.stem[: -len("_bad")] for p in BAD}
    assert names == {p.stem[: -len("_good")] for p in GOOD}


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*/kernel_*.py")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_diagnostic_on_valid_examples(path: Path) -> None:
    assert check_text(str(path), path.read_text()) == []


def test_diagnostic_fields_point_into_the_file() -> None:
    path = FIXTURES / "arange_1d_bad.py"
    (d,) = check_text(str(path), path.read_text())
    line = path.read_text().splitlines()[d.line - 1]
    assert line[d.column - 1:].startswith("x[nl.arange(128)")
    assert d.source == "nki-check" and d.doc_url.startswith("https://")


def test_broken_text_still_checks_the_intact_kernel() -> None:
    path = FIXTURES / "partition_limit_bad.py"
    text = path.read_text() + "\n\ndef half_typed(x:\n    return (\n"
    codes = [d.code for d in check_text(str(path), text)]
    assert codes == ["err_num_partition_exceed_arch_limit"]


@pytest.mark.parametrize("blob", [b"\x00\x01binary", b"x" * (3 * 1024 * 1024), ("(" * 3000 + "\n").encode(),
                                  "import neuronxcc.nki.language as nl\n" + "def f():\n" + "    if x:\n" * 200])
def test_bad_input_gives_at_most_one_info(blob: bytes | str) -> None:
    diags = check_text("hostile.py", blob)
    assert len(diags) <= 1 and all(d.severity == "info" for d in diags)


def test_classic_imports_flagged_only_when_the_sdk_rejects_them() -> None:
    from nki_agent.diagnostics.static import Settings

    path = EXAMPLES / "l1_add" / "kernel_classic.py"
    text = path.read_text()
    assert check_text(str(path), text) == []
    diags = check_text(str(path), text, Settings(sdk_generation="new"))
    assert {d.code for d in diags} == {"sim_removed_api"}
    lines = text.splitlines()
    assert all("neuronxcc.nki" in lines[d.line - 1][d.column - 1:d.end_column - 1] for d in diags)
    new = EXAMPLES / "l1_add" / "kernel_new.py"
    assert check_text(str(new), new.read_text(), Settings(sdk_generation="new")) == []


def test_matmul_dst_message_names_the_variable_and_the_fix_is_kept_out_of_loops() -> None:
    """The message names the user's tile (not the parameter ``dst``); no fix inside a loop, where successive
    matmuls into the tile may be meant to accumulate."""
    path = FIXTURES / "matmul_dst_memory_bad.py"
    text = path.read_text()
    (d,) = check_text(str(path), text)
    assert "`res`" in d.message and "`dst`" not in d.message and d.fixes
    looped = text.replace("    nisa.nc_matmul(dst=res, stationary=x, moving=y)",
                          "    for k in nl.affine_range(2):\n        nisa.nc_matmul(dst=res, stationary=x, moving=y)")
    (d,) = check_text(str(path), looped)
    assert d.code == "sim_matmul_psum_placement" and d.fixes == ()
