"""The tile-split quick fix writes its loop in the file's own indentation (two spaces, a tab, four spaces)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from nki_agent.diagnostics.fixes import apply_edits, verified_fixes
from nki_agent.diagnostics.static import check_text
from nki_agent.toolchain.judging.verify import verify_files

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "quickfix"
SPLITS = sorted(FIXTURES.glob("partition_split_*.py"))
UNITS = {"two_spaces": "  ", "tab": "\t", "four_spaces": "    "}


def _reindent(text: str, unit: str) -> str:
    """The fixture (written with 4 spaces) re-indented with ``unit`` per level."""
    out = []
    for line in text.split("\n"):
        spaces = len(line) - len(line.lstrip(" "))
        out.append(unit * (spaces // 4) + " " * (spaces % 4) + line[spaces:])
    return "\n".join(out)


@pytest.mark.parametrize("unit", UNITS.values(), ids=list(UNITS))
@pytest.mark.parametrize("path", SPLITS, ids=[p.stem for p in SPLITS])
def test_split_keeps_the_files_indentation(path: Path, unit: str, tmp_path: Path) -> None:
    text = _reindent(path.read_text(), unit)
    diags = check_text(str(path), text)
    offered = verified_fixes(str(path), text, diags, check_text)
    assert offered, "no verified split for the re-indented kernel"
    fix = next(iter(offered.values()))[0]
    fixed = apply_edits(text, fix.edits)
    for line in fixed.split("\n"):
        lead = line[:len(line) - len(line.lstrip())]
        assert re.fullmatch(f"(?:{re.escape(unit)})*", lead), f"foreign indentation {lead!r} in {line!r}"
    assert check_text(str(path), fixed) == []
    out = tmp_path / path.name
    out.write_text(fixed)
    assert verify_files(str(out), str(out), seeds=1).correct
