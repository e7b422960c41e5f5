"""Each quick fix: broken fixture -> fix offered only after re-check -> fixed kernel verifies correct."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from nki_agent.diagnostics.fixes import apply_edits, verified_fixes
from nki_agent.diagnostics.migrate import migrate_to_new_api
from nki_agent.diagnostics.model import Fix, TextEdit
from nki_agent.diagnostics.static import Settings, check_text
from nki_agent.diagnostics.static.rules import classic_on_new_sdk
from nki_agent.toolchain.judging.verify import verify_files

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "quickfix"
CASES = sorted(FIXTURES.glob("*.py"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_quick_fix_repairs_the_kernel(path: Path, tmp_path: Path) -> None:
    text = path.read_text()
    code = re.search(r"#\s*expect:\s*([a-z0-9_]+)", text).group(1)  # type: ignore[union-attr]
    diags = check_text(str(path), text)
    assert diags and {d.code for d in diags} == {code}  # an over-wide block may be flagged at several lines
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


# -- split an over-wide partition dim into a tile loop: offered only when provably the same computation -------
SPLIT = FIXTURES / "partition_split_classic.py"
NO_SPLIT = {
    "tile_used_after_the_block": ("    return out", "    nl.device_print('x', x)\n    return out"),
    "reads_a_tile_from_outside": ("    x = nl.load(a[0:256, 0:512])",
                                  "    w = nl.load(b[0:1, 0:512])\n    x = nl.load(a[0:256, 0:512])\n    x = x + w"),
    "writes_what_it_reads": ("out[0:256, 0:512], value=z", "b[0:256, 0:512], value=z"),
    "writes_a_tensor_twice": ("value=z)", "value=z)\n    nl.store(out[0:256, 0:512], value=y)"),
    "partition_reduction": ("nl.add(nl.multiply(nl.exp(x), 2.0), y)", "nl.add(nl.sum(x, axis=0), y)"),
    "transpose": ("nl.add(nl.multiply(nl.exp(x), 2.0), y)", "nl.add(nl.transpose(x), y)"),
    "matmul": ("nl.add(nl.multiply(nl.exp(x), 2.0), y)", "nl.matmul(x, y, transpose_x=True)"),
    "row_counts_differ": ("out[0:256, 0:512]", "out[0:128, 0:512]"),
    "row_offsets_unknown": ("b[0:256, :]", "b[k:256, :]"),
    "unknown_operand": ("2.0), y)", "scale), y)"),
    "two_statements_on_a_line": ("    y = nl.load(b[0:256, :])", "    y = nl.load(b[0:256, :]); q = 1"),
    "masked_load": ("nl.load(b[0:256, :])", "nl.load(b[0:256, :], mask=m)"),
}


@pytest.mark.parametrize("name", sorted(NO_SPLIT))
def test_no_split_when_not_provably_equivalent(name: str) -> None:
    old, new = NO_SPLIT[name]
    text = SPLIT.read_text().replace("def kernel(a, b):", "def kernel(a, b, k=0, scale=2.0, m=None):")
    assert old in text
    diags = check_text(str(SPLIT), text.replace(old, new))
    flagged = [d for d in diags if d.code == "err_num_partition_exceed_arch_limit"]
    assert flagged and all(d.fixes == () for d in flagged)


def test_split_keeps_the_block_and_only_rewrites_rows() -> None:
    text = SPLIT.read_text()
    (fix,) = check_text(str(SPLIT), text)[0].fixes
    fixed = apply_edits(text, fix.edits)
    assert "    for i in nl.affine_range(2):\n        x = nl.load(a[i * 128:(i + 1) * 128, 0:512])" in fixed
    assert "nl.store(out[i * 128:(i + 1) * 128, 0:512], value=z)\n    return out" in fixed
    assert fixed.count("nl.load(") == text.count("nl.load(")


def test_split_uses_a_fresh_loop_name() -> None:
    text = SPLIT.read_text().replace("def kernel(a, b):", "def kernel(a, b, i=0, i2=1):")
    (fix,) = check_text(str(SPLIT), text)[0].fixes
    assert "for i3 in nl.affine_range(2):" in apply_edits(text, fix.edits)


def test_split_of_an_indented_kernel_in_broken_text() -> None:
    """While the user types (the file does not parse), the intact kernel still gets its fix, re-indented."""
    text = SPLIT.read_text()
    body = text[text.index("@nki.jit"):]
    nested = text[:text.index("@nki.jit")] + "class K:\n" + "".join("    " + line if line.strip() else line
                                                                    for line in body.splitlines(True))
    broken = nested + "\n\ndef half_typed(x:\n"
    diags = [d for d in check_text(str(SPLIT), broken) if d.fixes]
    assert diags
    fixed = apply_edits(broken, diags[0].fixes[0].edits)
    assert "        for i in nl.affine_range(2):\n            x = nl.load(a[i * 128:(i + 1) * 128, 0:512])" in fixed


# -- classic -> new API migration: ISA calls in dst form, index arrays and masks as slices ---------------
MIGRATE = FIXTURES / "migrate"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# (classic kernel, its task): fixtures are their own task; the examples have a task.py next to them
MIGRATIONS = [(p, p) for p in sorted(MIGRATE.glob("*.py"))] + [
    (EXAMPLES / name / "kernel_classic.py", EXAMPLES / name / "task.py") for name in ("l1_add", "l1_gelu", "l1_relu")]


@pytest.mark.parametrize("kernel,task", MIGRATIONS, ids=[f"{k.parent.name}/{k.stem}" for k, _ in MIGRATIONS])
def test_migration_verifies_under_the_new_api(kernel: Path, task: Path) -> None:
    text = kernel.read_text()
    assert verify_files(str(kernel), str(task), seeds=1).generation == "classic"
    (fix,) = migrate_to_new_api(text)
    fixed_text = apply_edits(text, fix.edits)
    assert "import neuronxcc" not in fixed_text and "mask=" not in fixed_text and "nl.arange(" not in fixed_text
    assert check_text(str(kernel), fixed_text, Settings(sdk_generation="new")) == []
    fixed = task.parent / f"_migrated_{kernel.stem}.py"  # next to the task: examples import nothing else
    try:
        fixed.write_text(fixed_text)
        res = verify_files(str(fixed), str(task), seeds=2)
    finally:
        fixed.unlink()
    assert res.correct and res.generation == "new", res.problems


def test_migration_is_offered_on_the_classic_import_diagnostics() -> None:
    """The static rule's fix (wired to its diagnostics by the checker) survives ``verified_fixes``."""
    path = MIGRATE / "classic_isa_masked.py"
    text = path.read_text()
    settings = Settings(sdk_generation="new")
    diags = check_text(str(path), text, settings)
    assert diags and {d.code for d in diags} == {"sim_removed_api"}
    diags = [dataclasses.replace(d, fixes=classic_on_new_sdk.fixes(text)) for d in diags]
    offered = verified_fixes(str(path), text, diags, lambda p, t: check_text(p, t, settings))
    assert set(offered) == set(range(len(diags)))


def test_migration_of_isa_calls_names_the_result_tile() -> None:
    fixed = apply_edits(text := (MIGRATE / "classic_isa_masked.py").read_text(),
                        migrate_to_new_api(text)[0].edits)
    assert "        e = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)\n" \
           "        nisa.activation(dst=e, op=nl.exp, data=x)\n" in fixed
    # the call reads the name it rebinds: the result goes to a fresh tile first
    assert "nisa.tensor_scalar(dst=e_out, data=e, op0=nl.multiply" in fixed and "        e = e_out\n" in fixed
    assert "        tile_rows = min(P, n - t * P)\n" in fixed and "a[t * P:t * P + tile_rows, 0:d]" in fixed


NOT_MIGRATED = {
    "two_sources_without_dtype": ("nl.multiply, dtype=nl.float32,", "nl.multiply,"),
    "masks_differ": ("w = nl.load(b[t * P + i_p, i_f], mask=(t * P + i_p < n))",
                     "w = nl.load(b[t * P + i_p, i_f], mask=(t * P + i_p < n - 1))"),
    "loop_count_not_ceil": ("nl.affine_range((n + P - 1) // P)", "nl.affine_range((n + P) // P)"),
    "loop_variable_rebound": ("for t in", "for t in nl.affine_range(1):\n        pass\n    for t in"),
    "tile_start_not_t_times_p": ("t * P + i_p", "t * 64 + i_p"),
    "nested_isa_call": ("s = nisa.tensor_tensor(e, x, op=nl.add,", "s = nl.add(nisa.tensor_copy(e), x,"),
    "matmul": ("y = nisa.tensor_tensor(s, m, nl.multiply, dtype=nl.float32, mask=(t * P + i_p < n))",
               "y = nisa.nc_matmul(s, m)"),
    "masked_matmul": ("y = nisa.tensor_tensor(s, m, nl.multiply, dtype=nl.float32,", "y = nisa.nc_matmul(s, m,"),
    "isa_into_a_view": ("m = nisa.activation(", "m = x\n        m[...] = nisa.activation("),
    "on_chip_index_arrays": ("value=nl.add(y, w)", "value=nl.add(y, w[i_p, i_f])"),
    "mask_on_a_reduction": ("value=nl.add(y, w)", "value=nl.add(y, nl.sum(w, axis=1, mask=(t * P + i_p < n)))"),
    "unmasked_access_in_a_masked_loop": ("w = nl.load(b[t * P + i_p, i_f], mask=(t * P + i_p < n))",
                                         "w = nl.load(b[t * P + i_p, i_f])"),
    "tile_from_outside_the_loop": ("    for t in", "    z = nl.load(b[0:128, 0:d])\n    for t in"),
    "memset_in_a_masked_loop": ("        y = nisa.tensor_tensor(s, m",
                                "        o = nisa.memset((P, d), 1.0, nl.float32)\n        y = nisa.tensor_tensor(s, m"),
    "grid": ("import neuronxcc.nki.language as nl", "import neuronxcc.nki.language as nl\nGRID = (2,)"),
    "jit_options": ("@nki.jit", "@nki.jit(platform_target='trn2')"),
}


@pytest.mark.parametrize("name", sorted(NOT_MIGRATED))
def test_no_migration_when_not_exact(name: str) -> None:
    old, new = NOT_MIGRATED[name]
    text = (MIGRATE / "classic_isa_masked.py").read_text()
    assert old in text
    changed = text.replace(old, new)
    if name == "tile_from_outside_the_loop":
        changed = changed.replace("value=nl.add(y, w)", "value=nl.add(y, z)")
    assert migrate_to_new_api(changed) == []


def test_migration_of_isa_calls_in_a_helper_uses_the_helpers_own_facts() -> None:
    text = (MIGRATE / "classic_isa_memset.py").read_text()
    helper = "\n\ndef helper(t):\n    return t\n"
    (fix,) = migrate_to_new_api(text + helper)
    assert apply_edits(text + helper, fix.edits).endswith(helper)


@pytest.mark.parametrize("old,new", [("a\nb\nc\n", "a\nB\nc\n"), ("a\nb", "a\nb\nc"), ("a\nb\nc", "a"),
                                     ("x = 1", "y = 2\nx = 1\n"), ("", "z\n"), ("a\n\nb\n", "a\nb\n")])
def test_line_edits_reproduce_the_rewritten_text(old: str, new: str) -> None:
    from nki_agent.diagnostics.ast_edit import diff_edits

    assert apply_edits(old, diff_edits(old, new)) == new
