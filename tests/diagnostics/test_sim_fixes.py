"""Quick fixes for problems a run finds: broken fixture -> problem from verify -> fix proposed -> fix kept
only after verification of the fixed text (a temp copy) -> the fixed kernel verifies correct."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from nki_agent.diagnostics.fixes import apply_edits
from nki_agent.diagnostics.model import Fix, TextEdit, from_problem
from nki_agent.diagnostics.sim_fixes import fixes_for, migrate_to_new_api, verified
from nki_agent.diagnostics.static import check_text
from nki_agent.toolchain.facts.errors import Problem, SourceLocation
from nki_agent.toolchain.judging.verify import verify_files

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SIM = FIXTURES / "sim_fixes"
# run-time problems whose fix comes from a sim producer or from the static rule at the same line
CASES = [SIM / "affine_carried.py", SIM / "psum_dma_helper.py", FIXTURES / "quickfix" / "matmul_psum_bf16.py",
         FIXTURES / "quickfix" / "output_not_stored.py", FIXTURES / "quickfix" / "output_not_stored_new.py",
         SIM / "arange_via_names.py", SIM / "mask_and.py", SIM / "new_code_classic_imports.py",
         SIM / "tile_constant_256.py", SIM / "output_never_written.py"]


def _expected(text: str) -> tuple[str, int]:
    for n, line in enumerate(text.splitlines(), 1):
        if m := re.search(r"#\s*expect:\s*([a-z0-9_]+)", line):
            return m.group(1), n
    raise AssertionError("fixture without # expect:")


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_sim_fix_repairs_the_kernel(path: Path, tmp_path: Path) -> None:
    text = path.read_text()
    code, line = _expected(text)
    broken = verify_files(str(path), str(path), seeds=1)
    assert not broken.correct or any(p.severity == "warning" for p in broken.problems)  # races are warnings
    (problem,) = [p for p in broken.problems if p.severity in ("error", "warning")]
    assert (problem.code, problem.location.line if problem.location else None) == (code, line)
    candidates = fixes_for(problem, text, str(path))
    assert candidates, "no fix proposed"
    kept = verified(problem, text, candidates, isolate=False, directory=str(tmp_path))
    assert kept, "the fix did not survive its re-check"
    fixed = tmp_path / path.name
    fixed.write_text(apply_edits(text, kept[0].edits))
    res = verify_files(str(fixed), str(fixed), seeds=2)
    assert res.correct, res.problems
    assert check_text(str(fixed), fixed.read_text()) == []


def test_affine_fix_edits_only_the_loop_header() -> None:
    path = SIM / "affine_carried.py"
    text = path.read_text()
    problem = verify_files(str(path), str(path), seeds=1).problems[0]
    (fix,) = fixes_for(problem, text)
    fixed = apply_edits(text, fix.edits)
    assert fixed == text.replace("nl.affine_range(4)", "nl.sequential_range(4)")


def test_a_diagnostic_works_as_well_as_a_problem() -> None:
    path = SIM / "affine_carried.py"
    text = path.read_text()
    problem = verify_files(str(path), str(path), seeds=1).problems[0]
    assert fixes_for(from_problem(problem, "nki-sim"), text) == fixes_for(problem, text)


def test_no_fix_for_a_problem_in_another_file_or_without_a_producer() -> None:
    path = SIM / "affine_carried.py"
    text = path.read_text()
    problem = verify_files(str(path), str(path), seeds=1).problems[0]
    assert fixes_for(problem, text, "/elsewhere/other.py") == []
    other = Problem("sim_shape_mismatch", "operand shapes differ", location=SourceLocation(str(path), 22))
    assert fixes_for(other, text) == []
    wrong_var = Problem(problem.code, problem.message.replace("of t loop", "of k loop"), location=problem.location)
    assert fixes_for(wrong_var, text) == []


def test_a_fix_that_does_not_repair_the_run_is_dropped(tmp_path: Path) -> None:
    path = SIM / "affine_carried.py"
    text = path.read_text()
    problem = verify_files(str(path), str(path), seeds=1).problems[0]
    bogus = Fix("bogus", (TextEdit(1, 1, 1, 1, "# nothing\n"),))
    assert verified(problem, text, [bogus], isolate=False, directory=str(tmp_path)) == []


def test_verification_runs_sandboxed_by_default(tmp_path: Path) -> None:
    path = SIM / "psum_dma_helper.py"
    text = path.read_text()
    problem = verify_files(str(path), str(path), seeds=1).problems[0]
    assert verified(problem, text, fixes_for(problem, text), directory=str(tmp_path))


# -- classic -> new API ---------------------------------------------------------------------------------
def test_migration_of_a_portable_classic_kernel(tmp_path: Path) -> None:
    path = SIM / "classic_elementwise.py"
    text = path.read_text()
    missing = Problem("sim_python_exception", "ModuleNotFoundError: No module named 'neuronxcc'",
                      location=SourceLocation(str(path), 4))
    (fix,) = fixes_for(missing, text, str(path))
    assert fix == migrate_to_new_api(text)[0]
    fixed_text = apply_edits(text, fix.edits)
    assert "neuronxcc" not in fixed_text
    assert "import nki\nimport nki.language as nl\nfrom nki import isa as nisa\n" in fixed_text
    fixed = tmp_path / path.name
    fixed.write_text(fixed_text)
    res = verify_files(str(fixed), str(fixed), seeds=2)
    assert res.correct and res.generation == "new", res.problems
    assert check_text(str(fixed), fixed_text) == []
    assert verified(missing, text, [fix], isolate=False, directory=str(tmp_path)) == [fix]


NOT_MECHANICAL = {
    "arange": ("z = nl.add(", "i = nl.arange(128)[:, None]\n        z = nl.add("),
    "jit_options": ("@nki.jit", "@nki.jit(platform_target='trn2')"),
    "hbm_output": ("buffer=nl.shared_hbm", "buffer=nl.hbm"),
    "grid": ("import neuronxcc.nki.language as nl", "import neuronxcc.nki.language as nl\nGRID = (2,)"),
    "mask": ("0:512], z)", "0:512], z, mask=None)"),
    "module_escapes": ("    return out", "    helper(nl)\n    return out"),
    "local_import": ("def kernel(a, b):", "def kernel(a, b):\n    import neuronxcc.nki.isa as isa2"),
}


@pytest.mark.parametrize("name", sorted(NOT_MECHANICAL))
def test_no_migration_when_not_mechanical(name: str) -> None:
    old, new = NOT_MECHANICAL[name]
    text = (SIM / "classic_elementwise.py").read_text()
    assert old in text
    assert migrate_to_new_api(text.replace(old, new)) == []


def test_migration_rewrites_isa_calls_into_dst_form(tmp_path: Path) -> None:
    path = SIM / "classic_isa.py"
    (fix,) = migrate_to_new_api(path.read_text())
    fixed_text = apply_edits(path.read_text(), fix.edits)
    assert "neuronxcc" not in fixed_text and "dst=" in fixed_text
    fixed = tmp_path / path.name
    fixed.write_text(fixed_text)
    res = verify_files(str(fixed), str(fixed), seeds=2)
    assert res.correct and res.generation == "new", res.problems


def test_no_migration_for_new_api_files() -> None:
    text = (FIXTURES / "quickfix" / "psum_dma.py").read_text()
    assert migrate_to_new_api(text) == []


def test_bf16_psum_is_fine_when_the_file_targets_trn3() -> None:
    path = FIXTURES / "static" / "matmul_psum_dtype_bad.py"
    text = path.read_text().replace('TARGET = "trn1"', 'TARGET = "trn3"')
    assert check_text(str(path), text) == []


WRONG = [SIM / "wrong_psum_bf16.py", SIM / "wrong_hbm_in_loop_new.py"]


@pytest.mark.parametrize("path", WRONG, ids=[p.stem for p in WRONG])
def test_wrong_result_fixes(path: Path, tmp_path: Path) -> None:
    """Kernels that run but compute the wrong thing: the fix comes from the wrong-result producers."""
    text = path.read_text()
    broken = verify_files(str(path), str(path), seeds=1)
    assert broken.compiled and not broken.correct and not [p for p in broken.problems if p.severity == "error"]
    wrong = Problem("sim_wrong_result", "outputs differ", location=SourceLocation(str(path), 1))
    candidates = fixes_for(wrong, text, str(path))
    kept = verified(wrong, text, candidates, isolate=False, directory=str(tmp_path))
    assert kept, [c.title for c in candidates]
    fixed = tmp_path / path.name
    fixed.write_text(apply_edits(text, kept[0].edits))
    assert verify_files(str(fixed), str(fixed), seeds=2).correct
