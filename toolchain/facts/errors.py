"""Error identities raised by the embedded toolchain, and the exception that carries them.

Documented NKI ids (the ``err_*`` catalog of the classic compiler) keep their real names and link to
the pinned v2.26.1 error guide (the ``latest`` page was removed in SDK 2.27). Conditions the real
toolchain reports without a documented id get a ``sim_*`` id of ours and link to the API page that
states the rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The error guide was deleted from "latest" in SDK 2.27; v2.26.1 is the last published copy.
ERRORS_PAGE = "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.26.1/nki/api/nki.errors.html"
_API = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated"
_ARCH = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/guides/architecture/trainium_inferentia2_arch.html"
_TILING = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/get-started/about/tiling-overview.html"

# Documented ids (sdk 2.26 nki.errors.rst) the simulator can raise; value = one-line title.
DOCUMENTED: dict[str, str] = {
    "err_1d_arange_not_supported": "on-chip tiles need 2-D index arrays",
    "err_ambiguous_tensor_truth_value": "and/or/not/if on a multi-element tensor",
    "err_activation_scale_scalar_or_vector": "activation scale must be a scalar or a (P, 1) vector",
    "err_activation_bias_invalid_type": "activation bias must be a float vector",
    "err_cannot_assign_to_index": "index tensors are read-only",
    "err_cannot_update_immutable_parameter": "kernel inputs are read-only",
    "err_control_flow_condition_depending_on_arange": "and/or/not/if on nl.arange/mgrid values",
    "err_dynamic_control_flow_not_supported": "control flow on runtime tensor values",
    "err_exceed_max_supported_dimension": "too many dimensions for this API",
    "err_hbm_tensor_with_init_value_not_supported": "HBM tensors cannot be created with a value",
    "err_leading_dimension_of_tensor_must_be_partition": "dim 0 of an on-chip tensor must be the partition dim",
    "err_mutable_parameter_not_returned": "a mutated mutable parameter must be returned",
    "err_nested_kernel_with_spmd_grid": "a kernel cannot launch a kernel with a grid",
    "err_nki_api_outside_of_nki_kernel": "NKI API called outside a kernel",
    "err_num_partition_exceed_arch_limit": "partition dim larger than 128",
    "err_num_partition_mismatch": "operands have different partition counts",
    "err_shared_hbm_must_in_kernel_level": "shared_hbm tensors only at kernel top level",
    "err_size_of_dimension_exceed_arch_limit": "a dimension exceeds the API limit",
    "err_store_dst_shape_smaller_than_other_shape": "assignment destination smaller than source",
    "err_tensor_access_out_of_bound": "static index out of bounds",
    "err_tensor_output_not_written_to": "kernel output never written",
    "err_unexpected_output_dependencies": "affine_range iterations write the same location",
    "err_unsupported_expression_in_mask": "mask is not an affine predicate",
    "err_unsupported_memory": "operand in the wrong memory",
    "err_unsupported_mixing_basic_advanced_tensor_indexing": "slices mixed with index arrays",
    "err_while_loop_requires_unconditional_entry": "while loops need the do-while form",
}

# Our ids for conditions with no documented id; value = (title, doc url).
_SETUP = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/setup/index.html"
_RUNTIME = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/neuron-runtime/guides/configuration-guide.html"
_PROFILE = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/guides/use-neuron-profile.html"
SIMULATOR: dict[str, tuple[str, str]] = {
    "sim_matmul_operand_limit": ("matmul operand or result exceeds TensorE limits", f"{_API}/nki.isa.nc_matmul.html"),
    "sim_matmul_psum_placement": ("matmul must read SBUF and write PSUM", f"{_API}/nki.isa.nc_matmul.html"),
    "sim_psum_bank_overflow": ("PSUM tile wider than one 2 KiB bank", _TILING),
    "err_stack_overflow_sbuf": ("live SBUF tiles exceed the per-partition capacity", _ARCH),
    "err_stack_overflow_psum": ("live PSUM tiles exceed the 16 KiB per partition", _ARCH),
    "sim_unsupported_dtype": ("dtype not supported for this op on this target", f"{_API}/nki.isa.nc_matmul.html"),
    "sim_shape_mismatch": ("operand shapes do not match", _TILING),
    "sim_invalid_argument": ("invalid argument to an NKI API", _TILING),
    "sim_unsupported_api": ("API not modelled by the embedded simulator", _TILING),
    "sim_removed_api": ("API does not exist in this NKI generation", "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/migration/index.html"),
    "sim_uninitialized_read": ("read of on-chip memory that was never written", _TILING),
    "sim_python_exception": ("Python exception raised inside the kernel", _TILING),
    "sim_timeout": ("kernel exceeded the simulation time limit", _TILING),
    "sim_memory_limit": ("kernel exceeded the simulation memory limit", _TILING),
    "sim_no_kernel": ("no NKI kernel found", _TILING),
    "sim_syntax_error": ("the file is not valid Python", _TILING),
    "sim_bad_input": ("the input could not be read", _TILING),
    "sim_task_error": ("the task module is invalid", _TILING),
    "sim_task_not_found": ("the task named by `# nki-task:` does not exist", _TILING),
    "sim_input_mutated": ("the kernel wrote into one of its inputs", _TILING),
    "sim_wrong_result": ("kernel output differs from the reference", _TILING),
    "sim_runner_disagrees": ("the simulator and the remote runner disagree on correctness", _TILING),
    # the remote runner's device backend (runner/backends/)
    "runner_sdk_missing": ("the Neuron SDK is not installed on the runner", _SETUP),
    "runner_device_unavailable": ("the runner has no usable NeuronCore", _RUNTIME),
    "runner_device_error": ("the Neuron device or runtime failed while running the kernel", _RUNTIME),
    "runner_timing_run_incorrect": ("the timed run's outputs differ from the reference", _PROFILE),
    "runner_not_measured": ("the runner could not measure this kernel's latency", _PROFILE),
    "runner_baseline_cpu": ("the baseline ran on CPU, not on the device", _SETUP),
    "sim_worker_crash": ("the simulation process died", _TILING),
    "sim_cancelled": ("the simulation was cancelled", _TILING),
    "sim_sandbox_violation": ("the kernel did something the sandbox forbids", _TILING),
    "sim_host_access": ("kernel code reached tile data outside the NKI API", f"{_API}/nki.language.NkiTensor.html"),
}

# The simulator's own limits (not the kernel's faults): a run they stop after a launch of the file completed is
# reported as cut off (an information note at the driver's line, ``taskless.run``), never as the kernel's error.
# ``sim_memory_limit`` covers the worker's address space and the recorder's call cap; ``sim_timeout`` the
# cooperative per-launch deadline; ``sim_unsupported_api`` what it does not model (e.g. a benchmark driver reading
# the latency ``nki.benchmark`` measured: there is no device). Each with how a note names it.
TOOL_LIMITS: dict[str, str] = {"sim_memory_limit": "the simulator's memory limit",
                               "sim_timeout": "the simulator's time limit",
                               "sim_unsupported_api": "an API the simulator does not model"}


def doc_url(code: str) -> str:
    """Documentation link for an error id (anchors follow the Sphinx slug of the section title)."""
    if code in DOCUMENTED:
        return f"{ERRORS_PAGE}#{code.replace('_', '-')}"
    if code in SIMULATOR:
        return SIMULATOR[code][1]
    return ERRORS_PAGE


def title(code: str) -> str:
    """Short title of an error id."""
    if code in DOCUMENTED:
        return DOCUMENTED[code]
    if code in SIMULATOR:
        return SIMULATOR[code][0]
    return code


@dataclass(frozen=True)
class SourceLocation:
    """A 1-based line / column span in a file (column counts characters, as Python's AST does + 1)."""

    path: str
    line: int
    column: int = 1
    end_line: int | None = None
    end_column: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line if self.end_line is not None else self.line,
            "end_column": self.end_column if self.end_column is not None else self.column,
        }


@dataclass(frozen=True)
class Related:
    """A secondary location that explains an error (e.g. where a tile was created)."""

    location: SourceLocation
    message: str


class NkiError(Exception):
    """A constraint violation found while simulating a kernel, placed at the user's source line."""

    def __init__(
        self,
        code: str,
        message: str,
        location: SourceLocation | None = None,
        related: tuple[Related, ...] = (),
        severity: str = "error",
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.location = location
        self.related = related
        self.severity = severity

    def __str__(self) -> str:  # the shape neuronx-cc users know: "file:line: [code] message"
        where = f"{self.location.path}:{self.location.line}: " if self.location else ""
        return f"{where}[{self.code}] {self.message}"


@dataclass(frozen=True)
class Problem:
    """Plain-data form of an NkiError (what crosses process boundaries and reaches diagnostics)."""

    code: str
    message: str
    severity: str = "error"
    location: SourceLocation | None = None
    related: tuple[Related, ...] = field(default_factory=tuple)

    @property
    def doc_url(self) -> str:
        return doc_url(self.code)

    @classmethod
    def from_error(cls, err: NkiError) -> "Problem":
        return cls(err.code, err.message, err.severity, err.location, err.related)

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "location": self.location.as_dict() if self.location else None,
            "related": [{"location": r.location.as_dict(), "message": r.message} for r in self.related],
            "doc_url": self.doc_url,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Problem":
        def loc(x: dict[str, Any] | None) -> SourceLocation | None:
            return SourceLocation(**x) if x else None

        related = tuple(Related(loc(r["location"]), r["message"]) for r in d.get("related", ()))  # type: ignore[arg-type]
        return cls(d["code"], d["message"], d.get("severity", "error"), loc(d.get("location")), related)
