"""Message text -> catalog id: the front-end and simulator messages we know, and hints for backend messages.

The legacy tracer, the new NKI compiler and ``nki.simulate`` print messages without an id; these
tables give them the closest documented ``err_*`` id (or our ``sim_*`` / ``nki_*`` id). Order
matters: the first match wins, so specific patterns come before general ones.
"""

from __future__ import annotations

import re

_I = re.IGNORECASE

MESSAGE_CODES: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p, _I), c) for p, c in (
    (r"\berr_[a-z0-9_]+\b", "<literal>"),
    (r"insufficient rank|must have at least 2 dimensions", "nki_tile_rank"),
    (r"multi-dimensional subscript to arange|with 1d arange", "err_1d_arange_not_supported"),
    (r"unexpected output dependencies", "err_unexpected_output_dependencies"),
    (r"out-of-bound access for tensor|exceed dimension size", "err_tensor_access_out_of_bound"),
    (r"number of partitions.{0,40}mismatch", "err_num_partition_mismatch"),
    (r"(partition dim(ension)?( size)?|number of partitions) \d+ exceeds?", "err_num_partition_exceed_arch_limit"),
    (r"size of dimension \d+ in .{0,80} exceed", "err_size_of_dimension_exceed_arch_limit"),
    (r"exceed max supported number of dimensions", "err_exceed_max_supported_dimension"),
    (r"truth value of a multi-element", "err_ambiguous_tensor_truth_value"),
    (r"control-flow depending on `?nl\.(arange|mgrid)", "err_control_flow_condition_depending_on_arange"),
    (r"dynamic control-flow depending on tensor value", "err_dynamic_control_flow_not_supported"),
    (r"cannot update immutable parameter", "err_cannot_update_immutable_parameter"),
    (r"'index' tensor does not support item assignment", "err_cannot_assign_to_index"),
    (r"creating hbm tensor with init value", "err_hbm_tensor_with_init_value_not_supported"),
    (r"creating sbuf/psum tensor with init value", "err_tensor_creation_on_scratchpad_with_init_value_not_supported"),
    (r"referenced outside of its parent scope", "err_local_variable_used_out_of_scope"),
    (r"mutable kernel parameter not returned", "err_mutable_parameter_not_returned"),
    (r"calling kernel with spmd grid", "err_nested_kernel_with_spmd_grid"),
    (r"shared_hbm buffer can only be created", "err_shared_hbm_must_in_kernel_level"),
    (r"illegal assignment destination shape", "err_store_dst_shape_smaller_than_other_shape"),
    (r"failed to infer tile from", "err_failed_to_infer_tile_from_local_tensor"),
    (r"mixing basic tensor indexing and advanced", "err_unsupported_mixing_basic_advanced_tensor_indexing"),
    (r"traditional while loops are not supported", "err_while_loop_requires_unconditional_entry"),
    (r"to be in address space|dst must be in \[|src must be in \[", "err_unsupported_memory"),
    (r"does not match the expected shape", "err_annotation_shape_mismatch"),
    (r"bias argument must also be specified", "err_bias_tensor_must_be_specified_in_allocation"),
    (r"with tensorengine is not allowed in allocated", "err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel"),
    (r"is a runtime value|is not an affine expression", "err_unsupported_expression_in_mask"),
    (r"nki api .{0,30}outside of .{0,10}kernel|no trace context", "err_nki_api_outside_of_nki_kernel"),
    (r"stationary free dimension|moving free dimension|gemm_\w*max", "sim_matmul_operand_limit"),
    (r"dtype must be .{0,40} on gen\d|unsupported dtype", "sim_unsupported_dtype"),
    (r"same number of elements|partition dim size must be preserved|shape must match|tensors have different shapes",
     "sim_shape_mismatch"),
    (r"has no attribute", "sim_removed_api"),
    (r"unexpected keyword argument|invalid partition stride", "sim_invalid_argument"),
    (r"unsupported expression on list comprehension", "nki_unsupported_syntax"),
))

# Backend messages whose cause is known from real reports: a one-line hint added to the diagnostic.
HINTS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p, _I), h) for p, h in (
    (r"can only handle single store",
     "usually `+=` on an SBUF tensor inside nl.affine_range: accumulate in PSUM or use nl.sequential_range"),
    (r"expect neuronreducemacro",
     "seen when a reduction reads an SBUF tile updated in place with `+=`: use a separate temporary tile"),
    (r"allocated memory out of bound",
     "the SBUF needed at once does not fit one partition: stream tiles and reuse buffers, or check allocation "
     "base addresses"),
    (r"couldn't be allocated in sb", "one instruction's operands exceed the SBUF partition: shrink the named tensors"),
    (r"is_subset\(\): incompatible function arguments",
     "known islpy incompatibility: pin islpy==2026.1 or use neuronx-cc 2.26"),
    (r"number of activation tables",
     "seen with XLA_USE_BF16=1 plus --auto-cast=none: cast the model with model.to(torch.bfloat16) instead"),
    (r"type must be boolean, but is null", "comes from a deprecated kernel path; this attention kernel needs trn2/trn3"),
    (r"core barrier", "seen when an LNC2 grid kernel is called more than once in one traced graph"),
    (r"basic blocks", "seen with dynamic loops (nl.fori_loop, nl.while_loop, nl.dynamic_range)"),
    (r"too many strides", "an access pattern with too many nested strides: simplify the indexing of that tensor"),
    (r"identical function name", "seen when the same kernel is inlined twice into one graph"),
))


def classify(message: str, known: set[str] | frozenset[str] = frozenset()) -> str | None:
    """The catalog id for a front-end / simulator message, or None when no pattern matches."""
    for pat, code in MESSAGE_CODES:
        m = pat.search(message)
        if not m:
            continue
        if code == "<literal>":
            if m.group(0) in known:
                return m.group(0)
            continue
        return code
    return None


def hint(message: str) -> str:
    for pat, text in HINTS:
        if pat.search(message):
            return text
    return ""
