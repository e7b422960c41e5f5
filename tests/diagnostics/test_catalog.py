"""The catalog covers every id we can emit or the research doc names, each with our explanation, fix and link."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from nki_agent.diagnostics import catalog
from nki_agent.toolchain.facts import errors

DOC = Path(__file__).resolve().parents[3] / "shared" / "docs" / "nki-errors.md"

# nki-errors.md §1: the 36 entries of the last catalog + 2 historical ids.
ERR_IDS = ["err_1d_arange_not_supported", "err_activation_bias_invalid_type", "err_activation_scale_invalid_type", "err_activation_scale_scalar_or_vector", "err_ambiguous_tensor_truth_value", "err_annotation_shape_mismatch", "err_bias_tensor_must_be_specified_in_allocation", "err_cannot_assign_to_index", "err_cannot_update_immutable_parameter", "err_control_flow_condition_depending_on_arange", "err_copy_dynamic_indirect_indices_not_natively_supported", "err_dynamic_control_flow_not_supported", "err_exceed_max_supported_dimension", "err_failed_to_infer_tile_from_local_tensor", "err_hbm_tensor_with_init_value_not_supported", "err_indirect_indices_are_not_supported_with_nki_api", "err_indirect_indices_free_dim", "err_leading_dimension_of_tensor_must_be_partition", "err_local_variable_used_out_of_scope", "err_mutable_parameter_not_returned", "err_nested_kernel_with_spmd_grid", "err_nki_api_outside_of_nki_kernel", "err_num_partition_exceed_arch_limit", "err_num_partition_mismatch", "err_shared_hbm_must_in_kernel_level", "err_size_of_dimension_exceed_arch_limit", "err_store_dst_shape_smaller_than_other_shape", "err_tensor_access_out_of_bound", "err_tensor_creation_on_scratchpad_with_init_value_not_supported", "err_tensor_output_not_written_to", "err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel", "err_unexpected_output_dependencies", "err_unsupported_expression_in_mask", "err_unsupported_memory", "err_unsupported_mixing_basic_advanced_tensor_indexing", "err_while_loop_requires_unconditional_entry", "err_read_modify_write_on_kernel_parameter", "err_tensor_creation_on_scratchpad_with_init_value_not_allowed"]

# §4: the 60 documented NCC codes (ranges expanded).
NCC_DOCUMENTED = ["EARG001", "EBIR023", "EBVF030", "EHCA005", "EMOD025", "EOOM001", "EOOM002", "ESFH002", "ESPP004", "ESPP047", "EUOC002", "EVRF001", "EVRF004", "EVRF005", "EVRF006", "EVRF007", "EVRF009", "EVRF010", "EVRF011", "EVRF013", "EVRF015", "EVRF016", "EVRF017", "EVRF018", "EVRF019", "EVRF022", "EVRF031", "EVRF035", "EVRF051", "EVRF052", "EVRF056", "EVRF057", "EVRF058", "EVRF059", "EVRF064", "EVRF065", "EXSP001", "EXTP004"]
NCC_DOCUMENTED += [f"EVRF{n:03d}" for n in [*range(36, 43), *range(43, 51), 53, 54, 55, 60, 61, 62, 63]]
NCC_DOCUMENTED = [f"NCC_{c}" for c in NCC_DOCUMENTED]
# §4: codes seen only in issues and release notes, and the old bracket codes / driver envelopes.
BACKEND_SEEN = ["NCC_ITEN404", "NCC_ITEN406", "NCC_INLA001", "NCC_IXLV002", "NCC_IXGM002", "NCC_IXCG856", "NCC_IBIR229", "NCC_ILIN902", "NCC_IBIR182", "NCC_IRPX902", "NCC_ESMP002", "NCC_CFG015", "NCC_ISMP902", "NCC_ITRF901", "TEN404", "GCA035", "GCA046", "NLA001", "NKI005", "SCH713", "F134", "F137", "F139", "NRT_EXEC_OOB", "NRT_FAILURE", "NRT_RESOURCE"]


def test_counts() -> None:
    assert len(set(ERR_IDS)) == 38 and len(set(NCC_DOCUMENTED)) == 60


@pytest.mark.parametrize("code", sorted({*ERR_IDS, *NCC_DOCUMENTED, *BACKEND_SEEN, *errors.DOCUMENTED,
                                          *errors.SIMULATOR}))
def test_entry_is_complete(code: str) -> None:
    e = catalog.lookup(code)
    assert e is not None, code
    assert e.code == code
    assert len(e.title) > 5 and len(e.explanation) > 20 and len(e.fix) > 5
    assert e.doc_url.startswith("https://awsdocs-neuron.readthedocs-hosted.com/")
    assert e.category in {"tracing", "simulator", "compiler", "internal", "driver", "runtime", "log"}


def test_every_entry_is_complete() -> None:
    for e in catalog.entries().values():
        assert e.title and e.explanation and e.fix and e.doc_url.startswith("https://"), e.code


def test_links() -> None:
    assert catalog.doc_url("err_unsupported_memory") == (
        "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.26.1/nki/api/nki.errors.html#err-unsupported-memory")
    assert catalog.doc_url("NCC_EVRF059").endswith("/en/latest/compiler/error-codes/EVRF059.html")
    for code in errors.DOCUMENTED:
        assert catalog.doc_url(code) == errors.doc_url(code)
    for code in errors.SIMULATOR:
        assert catalog.doc_url(code) == errors.doc_url(code)
    assert all("/v2.26.1/" in catalog.doc_url(c) for c in ERR_IDS)


def test_internal_errors_are_not_your_bug() -> None:
    for code in ("NCC_ITEN404", "TEN404", "NCC_INLA001", "NCC_IXLV002", "F134", "log_internal_compiler_error"):
        assert catalog.is_internal(code), code
    for code in ("NCC_EVRF059", "GCA035", "F137", "err_unsupported_memory", "NRT_EXEC_OOB"):
        assert not catalog.is_internal(code), code
    assert catalog.is_internal("NCC_IZZZ123")  # an unknown internal code is still internal


@pytest.mark.parametrize("spelling,code", [("[TEN404]", "TEN404"), ("ncc_evrf059", "NCC_EVRF059"),
                                           ("EVRF059", "NCC_EVRF059"), ("NCC_TEN404", "TEN404"),
                                           ("err-unsupported-memory", "err_unsupported_memory"),
                                           ("#err-tensor-access-out-of-bound", "err_tensor_access_out_of_bound")])
def test_spellings(spelling: str, code: str) -> None:
    e = catalog.lookup(spelling)
    assert e is not None and e.code == code


SNAPSHOT = Path(__file__).resolve().parents[1] / "fixtures" / "catalog"


def _gram_hash(gram: str) -> str:
    return hashlib.blake2b(gram.encode(), digest_size=4).hexdigest()


def _doc_grams() -> set[str]:
    """Hashes of every 8-word run of the research doc: from the doc beside the repository when it is there,
    else from the committed snapshot (hashes only, no text), which must then equal the doc's."""
    snap = {ln.strip() for ln in (SNAPSHOT / "doc_grams.txt").read_text().splitlines()
            if ln.strip() and not ln.startswith("#")}
    if DOC.exists():
        words = re.findall(r"[a-z0-9_]+", DOC.read_text(encoding="utf-8").lower())
        live = {_gram_hash(" ".join(words[i:i + 8])) for i in range(len(words) - 7)}
        assert live == snap, "the research doc changed: regenerate tests/fixtures/catalog/doc_grams.txt"
        return live
    return snap


def _doc_ids() -> set[str]:
    snap = {ln.strip() for ln in (SNAPSHOT / "doc_ids.txt").read_text().splitlines()
            if ln.strip() and not ln.startswith("#")}
    if DOC.exists():
        text = DOC.read_text(encoding="utf-8")
        section1 = text.split("### 1b.")[0]
        live = set(re.findall(r"`(err_[a-z0-9_]+)`", section1))
        live |= set(re.findall(r"\b(NCC_[A-Z]{3,5}\d{3})\b", text.split("## 4.")[1]))
        assert live == snap, "the research doc changed: regenerate tests/fixtures/catalog/doc_ids.txt"
    return snap


def test_explanations_are_our_own_words() -> None:
    """No explanation copies a doc sentence: no 8-word run in common with the research doc's tables."""
    grams = _doc_grams()
    for e in catalog.entries().values():
        words = re.findall(r"[a-z0-9_]+", f"{e.explanation} {e.fix}".lower())
        copied = [" ".join(words[i:i + 8]) for i in range(len(words) - 7)
                  if _gram_hash(" ".join(words[i:i + 8])) in grams]
        assert not copied, (e.code, copied)


def test_doc_ids_are_all_in_the_catalog() -> None:
    missing = sorted(c for c in _doc_ids() if catalog.lookup(c) is None and c != "err_foo_bar")  # anchor example
    assert not missing
