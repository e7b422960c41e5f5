"""Kernel Forge's request and response bodies (pydantic: they appear in the runner's OpenAPI schema), and
the task module generated from a request's ``input_specs`` + ``reference_source`` (``forge.py`` serves them).

Field names, defaults and ranges are Kernel Forge's (``infrastructure/reward_server/*.py`` of
aws-samples/sample-ATX-custom-NKI-Agent); the fields it lacks are marked as extensions. The generated
task is in the toolchain's format (``toolchain/tasks.py``): ``get_inputs()`` draws each input with
``np.random`` (seeded per seed by the toolchain; bfloat16 drawn as ``ml_dtypes.bfloat16``), ``class
Model`` calls the client's reference as Kernel Forge does (torch tensors, ``no_grad``; the toolchain
converts them), and ``TOLERANCE`` / ``KERNEL`` carry the request's tolerance and kernel name. The
reference source is embedded in the task and executed in a namespace of its own, so nothing it defines
can clash with the task's names.
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from nki_agent.toolchain.protocol.jobs import JobRequest, SourceFile

MAX_BATCH = 64
MAX_DEPTH = 32  # JSON nesting a body may have (its deepest: items → item → input_specs → spec → shape)
MAX_SOURCE_BYTES = 256 * 1024
MAX_INPUT_BYTES = 256 << 20
MAX_RANK = 8
KERNEL_FILE = "forge_kernel.py"
TASK_FILE = "forge_task.py"
REFERENCE_FILE = "<reference_source>"
TIMEOUTS = {"compile": 300.0, "verify": 600.0, "profile": 900.0, "baseline": 900.0}  # Kernel Forge's

ForgeDtype = Literal["float16", "float32", "bfloat16", "int8", "int16", "int32"]
_ITEMSIZE = {"float16": 2, "float32": 4, "bfloat16": 2, "int8": 1, "int16": 2, "int32": 4}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


# ---------------------------------------------------------------- request bodies


class ForgeInputSpec(BaseModel):
    model_config = ConfigDict(extra="ignore")

    shape: list[Annotated[StrictInt, Field(gt=0)]] = Field(min_length=1, max_length=MAX_RANK)
    dtype: ForgeDtype


DEFAULT_INPUT = [ForgeInputSpec(shape=[128, 256], dtype="float32")]


def _defines(source: str, names: tuple[str, ...]) -> bool:
    """Whether module-level code binds one of ``names`` (True too when the source does not parse:
    the job then reports the syntax error at its line)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in names:
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" or (a.asname or a.name.split(".")[0]) in names for a in node.names):
                return True
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(n, ast.Name) and n.id in names for t in targets for n in ast.walk(t)):
                return True
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody"):  # if / try / with / for at module level
                todo.extend(s for s in getattr(node, field, []) if isinstance(s, ast.stmt))
            for handler in getattr(node, "handlers", []):
                todo.extend(handler.body)
    return False


def _source(v: str, what: str) -> str:
    if len(v.encode("utf-8", "surrogatepass")) > MAX_SOURCE_BYTES:
        raise ValueError(f"{what} exceeds {MAX_SOURCE_BYTES} bytes")
    return v


class _ForgeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    kernel_source: str
    kernel_name: str = "nki_kernel"

    @field_validator("kernel_source")
    @classmethod
    def _kernel_size(cls, v: str) -> str:
        return _source(v, "kernel_source")

    @field_validator("kernel_name")
    @classmethod
    def _kernel_name(cls, v: str) -> str:
        if not _IDENT.fullmatch(v):
            raise ValueError("kernel_name must be a Python identifier of at most 64 characters")
        return v

    @model_validator(mode="after")
    def _kernel_defined(self) -> _ForgeRequest:
        if not _defines(self.kernel_source, (self.kernel_name,)):
            raise ValueError(f"kernel_source defines no {self.kernel_name!r}")
        return self


def _specs(v: list[ForgeInputSpec]) -> list[ForgeInputSpec]:
    total = sum(math.prod(s.shape) * _ITEMSIZE[s.dtype] for s in v)
    if total > MAX_INPUT_BYTES:
        raise ValueError(f"input_specs add up to {total} bytes; at most {MAX_INPUT_BYTES} are allowed")
    return v


def _reference_source(v: str) -> str:
    _source(v, "reference_source")
    if not _defines(v, ("reference", "Model", "forward")):
        raise ValueError("reference_source defines no `reference(*args)` function")
    return v


class _WithReference(BaseModel):
    reference_source: str

    @field_validator("reference_source")
    @classmethod
    def _reference(cls, v: str) -> str:
        return _reference_source(v)


class _Specs(BaseModel):
    input_specs: list[ForgeInputSpec] = Field(min_length=1, max_length=64)

    @field_validator("input_specs")
    @classmethod
    def _size(cls, v: list[ForgeInputSpec]) -> list[ForgeInputSpec]:
        return _specs(v)


class _Timed(BaseModel):
    warmup_runs: int = Field(5, ge=0, le=100)
    measure_runs: int = Field(50, ge=1, le=1000)


class ForgeCompileRequest(_ForgeRequest):
    op: Literal["compile"] = "compile"
    input_specs: list[ForgeInputSpec] = Field(default_factory=lambda: list(DEFAULT_INPUT), max_length=64,
                                              description="missing, null or [] → [{shape: [128, 256], dtype: float32}]")

    @field_validator("input_specs", mode="before")
    @classmethod
    def _default(cls, v: Any) -> Any:
        return [s.model_dump() for s in DEFAULT_INPUT] if v is None or v == [] else v

    @field_validator("input_specs")
    @classmethod
    def _size(cls, v: list[ForgeInputSpec]) -> list[ForgeInputSpec]:
        return _specs(v)


class ForgeVerifyRequest(_ForgeRequest, _WithReference, _Specs):
    op: Literal["verify"] = "verify"
    atol: float = Field(1e-3, ge=0)
    rtol: float = Field(1e-3, ge=0)
    seeds: int = Field(3, ge=1, le=16, description="visible seeds (extension); one hidden seed is always added")

    @field_validator("atol", "rtol", mode="before")
    @classmethod
    def _default_tol(cls, v: Any) -> Any:
        return 1e-3 if v is None else v


class ForgeProfileRequest(_ForgeRequest, _Specs, _Timed):
    op: Literal["profile"] = "profile"
    reference_source: str | None = Field(None, description="extension: also verify against this reference")

    @field_validator("reference_source")
    @classmethod
    def _reference(cls, v: str | None) -> str | None:
        return None if v is None else _reference_source(v)


class ForgeBaselineRequest(_WithReference, _Specs, _Timed):
    model_config = ConfigDict(extra="ignore")

    op: Literal["baseline"] = "baseline"


ForgeRequest = ForgeCompileRequest | ForgeVerifyRequest | ForgeProfileRequest | ForgeBaselineRequest
REQUESTS: dict[str, type[ForgeRequest]] = {"compile": ForgeCompileRequest, "verify": ForgeVerifyRequest,
                                           "profile": ForgeProfileRequest, "baseline": ForgeBaselineRequest}


class ForgeBatchRequest(BaseModel):
    items: list[dict[str, Any]] = Field(max_length=MAX_BATCH)


# ---------------------------------------------------------------- answers


class _Answer(BaseModel):
    job_id: str | None = None
    core_id: int | None = None
    nki_version: str | None = None
    sandbox: str | None = None


class ForgeCompileAnswer(_Answer):
    success: bool
    neff_path: str | None = None
    returncode: int | None = None
    errors: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    stderr_tail: list[str] = Field(default_factory=list)
    compile_time_s: float = 0.0


class ForgeVerifyAnswer(_Answer):
    correct: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatched_elements: int | None = None
    total_elements: int | None = None
    atol: float | None = None
    rtol: float | None = None
    verify_time_s: float = 0.0
    error: str | None = None
    seeds: int = 0


class ForgeProfileAnswer(_Answer):
    success: bool
    latency_mean_us: float | None = None
    latency_median_us: float | None = None
    latency_p99_us: float | None = None
    latency_min_us: float | None = None
    latency_max_us: float | None = None
    latency_std_us: float | None = None
    latency_kind: Literal["measured", "estimated", "not measured"] = "not measured"
    throughput_ops_per_s: float | None = None
    flops_utilization: float | None = None
    warmup_runs: int | None = None
    measure_runs: int | None = None
    profile_time_s: float = 0.0
    error: str | None = None
    seeds: int = 0
    correct: bool | None = Field(None, description="extension: the verdict when reference_source was given")


class ForgeBaselineAnswer(ForgeProfileAnswer):
    backend: str = ""
    baseline_time_s: float = 0.0


class ForgeUnknownOp(BaseModel):
    error: str


ForgeAnswer = ForgeCompileAnswer | ForgeVerifyAnswer | ForgeBaselineAnswer | ForgeProfileAnswer | ForgeUnknownOp


class ForgeBatchAnswer(BaseModel):
    results: list[ForgeAnswer]


class ForgeHealth(BaseModel):
    status: Literal["ok", "degraded"]


class ForgeDeepHealth(ForgeHealth):
    backend: str = ""
    sandbox: str = ""
    job_id: str | None = None
    seconds: float = 0.0
    imports: dict[str, str] = Field(default_factory=dict)
    error: str | None = None


# ---------------------------------------------------------------- the generated task

_TASK = '''"""Task generated by the runner from a Kernel Forge {op} request (runner/forge.py)."""
import numpy as np
import ml_dtypes
import torch

KERNEL = {kernel_name!r}
TOLERANCE = {{"atol": {atol!r}, "rtol": {rtol!r}}}
INPUT_SPECS = {specs!r}
_REFERENCE_SOURCE = {reference!r}


def get_inputs():
    """Per seed (np.random is seeded by the toolchain): normal floats, bfloat16 as bfloat16, ints in [-128, 127]."""
    out = []
    for shape, dtype in INPUT_SPECS:
        if dtype.startswith("int"):
            out.append(np.random.randint(-128, 128, size=shape).astype(dtype))
        else:
            x = np.random.standard_normal(shape).astype(np.float32)
            out.append(x.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)))
    return out
'''

_WITH_REFERENCE = '''

def _reference():
    ns = {"__name__": "forge_reference", "__builtins__": __builtins__}
    exec(compile(_REFERENCE_SOURCE, "<reference_source>", "exec"), ns)
    if callable(ns.get("reference")):
        return ns["reference"]
    if ns.get("Model") is not None:
        model = ns["Model"]
        return model if isinstance(model, torch.nn.Module) else model()
    if callable(ns.get("forward")):
        return ns["forward"]
    raise TypeError("reference_source defines no `reference(*args)` function")


class Model(torch.nn.Module):
    """Calls the reference as Kernel Forge does: torch tensors of the specs' dtypes, under no_grad."""

    def __init__(self):
        super().__init__()
        object.__setattr__(self, "_forge_reference", _reference())  # not a submodule: no parameters

    def forward(self, *args):
        return self._forge_reference(*args)
'''

_WITHOUT_REFERENCE = '''

def reference(*args):
    """No reference_source (compile, or the simulate run before a profile): the kernel runs, nothing is judged."""
    return args[0]
'''

_ANY_OUTPUT = '''

OUTPUT_SHAPES = {shapes!r}


def reference(*args):
    """No reference_source: Kernel Forge's profile judges nothing. The backends time only kernels judged
    correct, so this reference accepts any finite output of the shapes the kernel returned when simulated."""
    out = [np.zeros(shape, np.float32) for shape in OUTPUT_SHAPES]
    return out[0] if len(out) == 1 else out
'''
ANY_OUTPUT_ATOL = 1e300  # with zeros as the expected outputs: every finite value is within it


def task_source(op: str, specs: list[ForgeInputSpec], reference: str | None, kernel_name: str,
                atol: float = 1e-3, rtol: float = 1e-3, outputs: list[list[int]] | None = None) -> str:
    """The task module of a Kernel Forge request (the toolchain's task format, ``toolchain/tasks.py``);
    ``outputs``: the kernel's output shapes, for a profile without reference (see ``_ANY_OUTPUT``)."""
    if outputs is not None:
        atol, rtol = ANY_OUTPUT_ATOL, 0.0
    text = _TASK.format(op=op, kernel_name=kernel_name, atol=float(atol), rtol=float(rtol),
                        specs=[(tuple(s.shape), s.dtype) for s in specs], reference=reference or "")
    if reference is not None:
        return text + _WITH_REFERENCE
    if outputs is not None:
        return text + _ANY_OUTPUT.format(shapes=[tuple(o) for o in outputs])
    return text + _WITHOUT_REFERENCE


_PLACEHOLDER_KERNEL = "# Kernel Forge's baseline op times the reference only; there is no kernel.\n"


def needs_outputs(req: ForgeRequest) -> bool:
    """A profile without reference_source is judged against its own output shapes, learnt by a simulate run."""
    return isinstance(req, ForgeProfileRequest) and req.reference_source is None


def job_request(req: ForgeRequest, outputs: list[list[int]] | None = None, op: str | None = None) -> JobRequest:
    """The typed job of a validated Kernel Forge request (``op="simulate"``: the run that learns the
    kernel's output shapes; then ``outputs`` for the profile itself)."""
    op = op or req.op
    reference = None if op in ("compile", "simulate") else getattr(req, "reference_source", None)
    kernel_name = getattr(req, "kernel_name", "nki_kernel")
    tol = (getattr(req, "atol", 1e-3), getattr(req, "rtol", 1e-3))
    task = task_source(req.op, req.input_specs, reference, kernel_name, *tol, outputs=outputs)
    kernel = getattr(req, "kernel_source", _PLACEHOLDER_KERNEL)
    return JobRequest.model_validate({
        "op": op, "kernel": SourceFile(name=KERNEL_FILE, text=kernel), "task": SourceFile(name=TASK_FILE, text=task),
        "kernel_name": kernel_name, "seeds": getattr(req, "seeds", 3 if reference is not None else 1),
        "warmup": getattr(req, "warmup_runs", 5), "iterations": getattr(req, "measure_runs", 50),
        "timeout_s": TIMEOUTS["compile" if op == "simulate" else op]})


class BodyError(ValueError):
    """A body that is not JSON, or nests lists / objects deeper than ``MAX_DEPTH`` (HTTP 400)."""


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists / objects deeper than ``limit`` (iterative: no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        elif not isinstance(v, list):
            continue
        if d > limit:
            return True
        stack.extend((x, d + 1) for x in v if isinstance(x, (list, dict)))
    return False


def decode(raw: bytes) -> Any:
    """The JSON value of a body; ``BodyError`` when it is not JSON or nests deeper than ``MAX_DEPTH``."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise BodyError(f"the body nests JSON deeper than {MAX_DEPTH} levels") from None
    except ValueError:  # JSONDecodeError, UnicodeDecodeError, an integer of more than 4300 digits
        raise BodyError("the body is not JSON") from None
    if _depth_over(value, MAX_DEPTH):
        raise BodyError(f"the body nests JSON deeper than {MAX_DEPTH} levels")
    return value


def parse(item: Any) -> ForgeRequest | ForgeUnknownOp:
    """A Kernel Forge body: its validated request, ``ForgeUnknownOp`` for an unknown op; raises
    ``ValidationError`` for a malformed body of a known op, ``TypeError`` for a body that is no object."""
    if not isinstance(item, dict):
        raise TypeError("a Kernel Forge request is a JSON object")
    op = item.get("op")
    model = REQUESTS.get(op) if isinstance(op, str) else None
    if model is None:
        hint = " (Kernel Forge's skill search is not served by this runner)" if op == "skill" else ""
        shown = op[:64] if isinstance(op, str) else ("None" if op is None else f"({type(op).__name__})")
        return ForgeUnknownOp(error=f"unknown op: {shown}{hint}")
    return model.model_validate(item)
