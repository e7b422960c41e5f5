"""Each quick fix: broken fixture -> fix offered only after re-check -> fixed kernel verifies correct."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nki_agent.diagnostics.fixes import apply_edits, verified_fixes
from nki_agent.diagnostics.model import Fix, TextEdit
from nki_agent.diagnostics.static import check_text
from nki_agent.toolchain.verify import verify_files

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "quickfix"
CASES = sorted(FIXTURES.glob("*.py"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_quick_fix_repairs_the_kernel(path: Path, tmp_path: Path) -> None:
    text = path.read_text()
    code = re.search(r"#\s*expect:\s*([a-z0-9_]+)", text).group(1)  # type: ignore[union-attr]
    diags = check_text(str(path), text)
    assert [d.code for d in diags] == [code]
    broken = verify_files(str(path), str(path), seeds=1)
    assert not broken.correct
    offered = verified_fixes(str(path), text, diags, check_text)
    assert 0 in offered, "the fix did not survive its re-check"
    fixed_text = apply_edits(text, offered[0][0].edits)
    assert check_text(str(path), fixed_text) == []
    fixed = tmp_path / path.name
    fixed.write_text(fixed_text)
    res = verify_files(str(fixed), str(fixed), seeds=2)
    assert res.correct, res.problems


def test_a_fix_that_breaks_something_else_is_not_offered() -> None:
    path = FIXTURES / "bool_and.py"
    text = path.read_text()
    (diag,) = check_text(str(path), text)
    bad = Fix("bad", (TextEdit(diag.line, diag.column, diag.end_line, diag.end_column,
                               "nl.exp(nl.arange(8)) and lo"),))
    diag = type(diag)(**{**diag.__dict__, "fixes": (bad,)})
    assert verified_fixes(str(path), text, [diag], check_text) == {}
