"""Every real output of ../shared/docs/nki-errors.md §2 (copied to tests/fixtures/logs) parses to the right
code, file and line; hostile input (binary, 50 MB, deep nesting, garbage) yields at most one info diagnostic."""

from __future__ import annotations

import os
import random
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nki_agent.diagnostics import catalog
from nki_agent.diagnostics.parsers import parse_log

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
KERNELS = LOGS / "kernels"

# fixture -> (code, file basename the output names or None, line it names or None)
EXPECTED: dict[str, tuple[str, str | None, int | None]] = {
    "case01_simulate_kernel_1d_tile": ("nki_tile_rank", "vector_add_kernel_1742805467.py", 20),
    "case02_arange_loop": ("err_1d_arange_not_supported", "vector_add_kernel_1742805281.py", 23),
    "case03_output_dependencies": ("err_unexpected_output_dependencies", None, None),
    "case04_f134_baremetal": ("F134", "nki_first_pass.py", 121),  # only the call site is a user frame
    "case05_ten404_single_store": ("TEN404", None, None),
    "case06_ten404_reduce_macro_traceback": ("TEN404", "test_harness.py", 85),
    "case07_ten404_reduce_macro": ("TEN404", None, None),
    "case08_gca035_sbuf": ("GCA035", "test_harness.py", 196),
    "case09_nla001_alloc": ("NLA001", None, None),
    "case10_ten404_custom_call": ("TEN404", None, None),
    "case11_ten404_identical_name": ("TEN404", None, None),
    "case12_ten404_too_many_strides": ("TEN404", None, None),
    "case13_ten404_tensor_type": ("TEN404", None, None),
    "case14_wrapper_failed": ("log_compile_failed", None, None),
    "case15_truncated_traceback": ("log_unrecognized", None, None),  # the excerpt lost its error line
    "case16_tracing_caret": ("nki_trace_error", None, None),
    "case17_dma_shape": ("log_dma_shape_mismatch", None, None),
    "case18_ncc_ixgm002": ("NCC_IXGM002", None, None),
    "case19_ncc_ixlv002": ("NCC_IXLV002", None, None),
    "case19b_ncc_ixlv002_core_barrier": ("NCC_IXLV002", None, None),
    "case20_dge_oob": ("NRT_EXEC_OOB", None, None),
    "case21a_no_simulate_kernel": ("sim_removed_api", None, None),
    "case21b_precise_schedule": ("sim_invalid_argument", None, None),
    "case21c_kernel_grid": ("sim_removed_api", None, None),
    "case21d_gen2_matmul_dtype": ("sim_unsupported_dtype", None, None),
    "case22_neff_load": ("log_neff_load_failed", None, None),
    "case23_ncc_ixcg856": ("NCC_IXCG856", None, None),
    "case24_ncc_inla001_prose": ("NCC_INLA001", None, None),
    "case25_ncc_inla001_bool": ("NCC_INLA001", None, None),
    "case26_ncc_iten404": ("NCC_ITEN404", None, None),
    "case27_ice_banner": ("log_internal_compiler_error", None, None),
    "case28a_ncc_inla001_scratch": ("NCC_INLA001", None, None),
    "case28b_list_comprehension": ("nki_unsupported_syntax", None, None),
    "case28c_assertion_called_from": ("err_tensor_access_out_of_bound", "fused_segmented_attention_256.py", None),
    "case28d_dge_runtime": ("NRT_EXEC_OOB", None, None),
    "case28e_nrt_resource": ("NRT_RESOURCE", None, None),
    "case29_ncc_ismp902": ("NCC_ISMP902", None, None),
    "case30_ncc_itrf901": ("NCC_ITRF901", None, None),
    "case31_01": ("sim_shape_mismatch", None, None),
    "case31_02": ("err_tensor_access_out_of_bound", None, None),
    "case31_03": ("sim_shape_mismatch", None, None),
    "case31_04": ("err_unsupported_memory", None, None),
    "case31_05": ("err_num_partition_exceed_arch_limit", None, None),
    "case31_06": ("nki_tile_rank", None, None),
    "case31_07": ("sim_matmul_operand_limit", None, None),
    "case31_08": ("sim_removed_api", None, None),
    "case31_09": ("sim_python_exception", None, None),
    "case31_10": ("sim_invalid_argument", None, None),
    "doc_e1_nrt_exec_oob": ("NRT_EXEC_OOB", None, None),
    "doc_e2_nrt_failure": ("NRT_FAILURE", None, None),
    "doc_e3_partition_syntax": ("err_num_partition_exceed_arch_limit", None, None),
    "doc_e4_simulator_partition": ("err_num_partition_exceed_arch_limit", None, None),
    "doc_1c_nki005": ("NKI005", None, None),
    "doc_1c_gca046": ("GCA046", None, None),
    "doc_1c_sch713": ("SCH713", None, None),
    "synthetic_klr_block": ("nki_trace_error", "transpose_kernel.py", 14),  # KLR format, not a pasted output
    "synthetic_klr_warning": ("nki_trace_warning", "transpose_kernel.py", 9),
}
INTERNAL = {"TEN404", "NLA001", "NCC_IXGM002", "NCC_IXLV002", "NCC_IXCG856", "NCC_INLA001", "NCC_ITEN404",
            "NCC_ISMP902", "NCC_ITRF901", "F134", "log_internal_compiler_error", "log_dma_shape_mismatch"}


def _read(name: str) -> str:
    return (LOGS / f"{name}.txt").read_text(encoding="utf-8")


def test_every_fixture_has_an_expectation_and_every_case_a_fixture() -> None:
    on_disk = {p.stem for p in LOGS.glob("*.txt")}
    assert on_disk == set(EXPECTED)
    cases = {int(m.group(1)) for n in on_disk if (m := re.match(r"case(\d\d)", n))}
    assert cases == set(range(1, 32)), "one fixture per real output case 1..31 of nki-errors.md §2"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_output_maps_to_code_file_and_line(name: str) -> None:
    code, file, line = EXPECTED[name]
    diags = parse_log(_read(name))
    assert len(diags) == 1, [d.as_dict() for d in diags]
    d = diags[0]
    assert d.code == code
    assert catalog.lookup(d.code) is not None and d.doc_url.startswith("https://")
    if file:
        assert os.path.basename(d.path) == file
    if line:
        assert d.line == line
    assert d.not_your_bug == (code in INTERNAL)
    if d.not_your_bug:
        assert "not your bug" in d.message and "repro bundle" in d.message
    assert d.severity == ("info" if code == "log_unrecognized" else "warning" if code == "nki_trace_warning"
                          else "error")


def test_traceback_line_is_remapped_to_the_local_source(tmp_path: Path) -> None:
    src = tmp_path / "vector_add_kernel_1742805467.py"
    body = "\n" * 19 + "    result = nl.zeros((size,), dtype=v1.dtype)\n"
    src.write_text(body)
    (d,) = parse_log(_read("case01_simulate_kernel_1d_tile"), str(src), body)
    assert (d.path, d.line, d.column, d.end_column) == (str(src), 20, 5, len(body.splitlines()[19]) + 1)


def test_backend_error_attaches_to_the_named_tensor() -> None:
    src = KERNELS / "conv2d.py"
    (d,) = parse_log(_read("case08_gca035_sbuf"), str(src), src.read_text())
    assert (d.code, d.path, d.line) == ("GCA035", str(src), 9)  # position_out, the largest operand
    assert any(r.path.endswith("test_harness.py") for r in d.related)
    src = KERNELS / "lora.py"
    (d,) = parse_log(_read("case09_nla001_alloc"), str(src), src.read_text())
    assert (d.code, d.line) == ("NLA001", 9)  # nl.ndarray(..., name="b_tile") (statement starts on line 9)


def test_backend_error_without_tensor_attaches_to_kernel_def() -> None:
    src = KERNELS / "conv2d.py"
    for name in ("case05_ten404_single_store", "case29_ncc_ismp902", "case28a_ncc_inla001_scratch", "case20_dge_oob"):
        (d,) = parse_log(_read(name), str(src), src.read_text())
        assert (d.path, d.line) == (str(src), 6), name
    (d,) = parse_log(_read("case04_f134_baremetal"), str(KERNELS / "lora.py"), (KERNELS / "lora.py").read_text())
    assert d.line == 7


def test_tracing_caret_is_found_in_the_source() -> None:
    src = KERNELS / "transpose_kernel.py"
    (d,) = parse_log(_read("case16_tracing_caret"), str(src), src.read_text())
    assert (d.code, d.line) == ("nki_trace_error", 11)
    (d,) = parse_log(_read("synthetic_klr_block"), str(src), src.read_text())
    assert (d.path, d.line, d.column) == (str(src), 14, 9)
    assert d.related and d.related[0].line == 22


def test_called_from_function_is_found_in_the_source() -> None:
    src = KERNELS / "fused_segmented_attention_256.py"
    (d,) = parse_log(_read("case28c_assertion_called_from"), str(src), src.read_text())
    assert (d.path, d.line) == (str(src), 5)
    assert "index 1 exceed dimension size of 1" in d.message


def test_specific_error_hides_the_envelopes() -> None:
    text = _read("case30_ncc_itrf901") + _read("case27_ice_banner") + "[F134] neuronx-cc terminated abnormally\n"
    assert [d.code for d in parse_log(text)] == ["NCC_ITRF901"]


def test_log_path_places_unlocated_errors_on_the_log_line() -> None:
    text = "step 1 ok\nstep 2 ok\n" + _read("case18_ncc_ixgm002")
    (d,) = parse_log(text, log_path="ci.log")
    assert (d.path, d.line) == ("ci.log", 3)


def test_success_output_gives_nothing() -> None:
    assert parse_log("Compiler status PASS\n") == []
    assert parse_log("") == [] and parse_log("   \n") == []


# ---- hostile input -------------------------------------------------------------------------------------


def _at_most_one_info(diags: list) -> None:
    assert len(diags) <= 1
    assert all(d.severity == "info" and d.code == "log_unrecognized" for d in diags)


def test_binary_input() -> None:
    rnd = random.Random(0)
    blob = bytes(rnd.randrange(256) for _ in range(100_000)).decode("latin-1")
    diags = parse_log(blob)
    _at_most_one_info(diags)
    assert len(diags) == 1
    _at_most_one_info(parse_log("\x00" * 1000))


def test_50_mb_log_is_bounded_and_still_finds_the_final_error() -> None:
    filler = "2024-08-15T14:46:32Z INFO 3835 [Tensorizer]: pass Foo done in 0.01s\n"
    text = filler * (50 * 1024 * 1024 // len(filler)) + _read("case23_ncc_ixcg856")
    t0 = time.perf_counter()
    diags = parse_log(text)
    assert time.perf_counter() - t0 < 5.0
    assert [d.code for d in diags] == ["NCC_IXCG856"]


def test_50_mb_single_line_and_garbage() -> None:
    t0 = time.perf_counter()
    _at_most_one_info(parse_log("x" * (50 * 1024 * 1024)))
    _at_most_one_info(parse_log("(" * 1_000_000 + ")" * 1_000_000))
    _at_most_one_info(parse_log(("[" * 500 + "\n") * 20_000))
    assert time.perf_counter() - t0 < 10.0


def test_deeply_nested_source_and_traceback() -> None:
    nested = "def k():\n" + "".join("    " * i + "if x:\n" for i in range(1, 3000)) + "    " * 3000 + "pass\n"
    diags = parse_log(_read("case05_ten404_single_store"), "k.py", nested)
    assert [d.code for d in diags] == ["TEN404"] and diags[0].line == 1
    frames = "".join(f'  File "/u/k.py", line {i}, in f{i}\n    f{i + 1}()\n' for i in range(1, 5000))
    (d,) = parse_log("Traceback (most recent call last):\n" + frames + "RecursionError: maximum recursion depth\n")
    assert (d.code, d.line) == ("sim_python_exception", 4999)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=3000))
def test_random_text_never_crashes(text: str) -> None:
    diags = parse_log(text, "k.py", text)
    assert len(diags) <= 100
    infos = [d for d in diags if d.severity == "info"]
    assert len(infos) <= 1 and (not infos or len(diags) == 1)
    for d in diags:
        assert d.line >= 1 and d.column >= 1 and d.doc_url.startswith("https://")


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=3000))
def test_random_bytes_never_crash(data: bytes) -> None:
    diags = parse_log(data.decode("utf-8", errors="replace"))
    assert all(d.line >= 1 for d in diags)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(sorted(EXPECTED)), min_size=1, max_size=4), st.text(max_size=200))
def test_real_outputs_mixed_with_garbage_still_parse(names: list[str], noise: str) -> None:
    text = "\n".join(_read(n) + noise.replace("\n", " ") for n in names)
    diags = parse_log(text)
    assert 1 <= len(diags) <= 100
