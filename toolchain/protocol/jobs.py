"""The one typed protocol of kernel jobs: requests and results of compile / simulate / verify / profile / baseline.

Every result that crosses a process, HTTP or LSP boundary is one of these pydantic models: the jailed
workers' JSON is validated into them by the parent (``runner.LocalRunner``, ``judge.py``), the remote
runner's HTTP bodies are them (its OpenAPI schema is generated from them), the fix agent's tool
results and the language server's code lens and hovers read their fields. Results are staged like
KernelBench: ``compiled`` → ``correct`` → ``latency``; ``stage`` names the last stage reached.

Paths inside results (``Location.path``, ``kernel``, ``task``) are those of the machine that ran the
job; a remote client maps them back to its own files (``RemoteRunner``).

The workers themselves do not import pydantic (their start-up time matters); they write plain JSON
that must validate here, so a field added on one side and not the other fails the contract tests.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from nki_agent.toolchain.facts.errors import Problem, Related, SourceLocation, doc_url
from nki_agent.toolchain.protocol.cost import CostEstimate

Op = Literal["compile", "simulate", "verify", "profile", "baseline"]
Stage = Literal["none", "compiled", "correct", "latency"]
JobState = Literal["queued", "running", "done", "failed", "cancelled"]
LatencyKind = Literal["measured", "estimated", "not measured"]
# what a simulation ran: the task's inputs, or (no task) the file's __main__ driver, a pytest test of the
# workspace, the inputs of its shape lines, or nothing (no inputs found: ``toolchain/taskless/``)
Via = Literal["task", "main", "test", "shapes", "none"]

MAX_SOURCE_CHARS = 256 * 1024  # one kernel / task / module file (Kernel Forge's cap on kernel_source)
MAX_MODULES = 32
MAX_SEEDS = 16
_FILE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\.py$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=False, ser_json_inf_nan="strings")  # inf error: "Infinity"


# ---------------------------------------------------------------- problems and locations


class Location(_Model):
    path: str
    line: int
    column: int = 1
    end_line: int | None = None
    end_column: int | None = None

    def to_source(self) -> SourceLocation:
        return SourceLocation(self.path, self.line, self.column, self.end_line, self.end_column)


class RelatedInfo(_Model):
    location: Location
    message: str


class ProblemInfo(_Model):
    """A problem that stopped or marred a job (an ``errors.Problem`` on the wire)."""

    code: str
    message: str
    severity: Literal["error", "warning", "info", "hint"] = "error"
    location: Location | None = None
    related: list[RelatedInfo] = Field(default_factory=list)
    doc_url: str = ""

    @classmethod
    def of(cls, p: Problem) -> "ProblemInfo":
        return cls.model_validate(p.as_dict())

    def to_problem(self) -> Problem:
        loc = self.location.to_source() if self.location else None
        related = tuple(Related(r.location.to_source(), r.message) for r in self.related)
        return Problem(self.code, self.message, self.severity, loc, related)

    @field_validator("doc_url", mode="after")
    @classmethod
    def _doc(cls, v: str, info: Any) -> str:
        return v or doc_url(info.data.get("code", ""))


# ---------------------------------------------------------------- arrays, traces, mismatches


class ArgSpec(_Model):
    """Shape and dtype of one kernel argument (``shape`` is None for a non-array argument)."""

    shape: list[int] | None
    dtype: str
    value: str | None = None


class OutputSummary(_Model):
    shape: list[int]
    dtype: str
    min: float | None = None
    max: float | None = None
    nan: int = 0


class TraceEntry(_Model):
    """A tensor observed at a source line of the kernel (for hovers and inlay hints)."""

    line: int
    column: int
    name: str
    shape: list[int]
    dtype: str
    buffer: str


class MismatchMap(_Model):
    """Where an output's differing elements are: counts per bin of partitions (axis 0) x free elements
    (the other axes flattened); bin i starts at ``row_starts[i]`` / ``col_starts[i]`` (bounded, 16 x 32)."""

    partitions: int
    free: int
    row_starts: list[int] = Field(max_length=64)
    col_starts: list[int] = Field(max_length=64)
    counts: list[list[int]] = Field(max_length=64)


class Mismatch(_Model):
    """The first output element that differs, the tile that holds it, and the line that wrote it."""

    output: int
    index: list[int]
    got: float
    expected: float
    tile: list[int]
    offset_in_tile: list[int]
    line: int | None = None  # source line of the last store into that element, when known
    map: MismatchMap | None = None  # the output's mismatch counts over partition x free bins


class SeedFigures(_Model):
    """One seed's verdict and error figures. A hidden seed's number and inputs are never reported."""

    seed: int | None
    hidden: bool = False
    correct: bool
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    mismatches: int = 0
    elements: int = 0
    first_mismatch: Mismatch | None = None
    kernel_seconds: float = 0.0
    reference_seconds: float = 0.0
    message: str = ""


class Latency(_Model):
    """A kernel's (or the baseline's) latency; ``kind`` says whether a device measured it."""

    kind: LatencyKind = "not measured"
    source: str = ""  # how: "nki.benchmark", "BaremetalExecutor", "neuron-explorer", "cost model", "cpu"
    p50_us: float | None = None
    p99_us: float | None = None
    min_us: float | None = None
    max_us: float | None = None
    mean_us: float | None = None
    std_us: float | None = None
    iterations: int = 0
    warmup: int = 0
    spread: float | None = None  # (p99 - p50) / p50 of the last window
    core_id: int | None = None
    target: str | None = None

    def summary(self) -> str:
        """One line for people: "p50 12.3 µs (p99 12.9, n=50) measured on NeuronCore 0", "≈ 6.9 ms est.", ..."""
        if self.kind == "not measured" or self.p50_us is None:
            return "latency not measured"

        def t(us: float) -> str:
            return f"{us / 1000:.3g} ms" if us >= 1000 else f"{us:.3g} µs"

        if self.kind == "estimated":
            return f"≈ {t(self.p50_us)} est." + (f" {self.target}" if self.target else "")
        extra = f"p99 {t(self.p99_us)}, " if self.p99_us is not None else ""
        where = f" on NeuronCore {self.core_id}" if self.core_id is not None else ""
        return f"p50 {t(self.p50_us)} ({extra}n={self.iterations}) measured{where}"


# ---------------------------------------------------------------- results


class _Result(_Model):
    kernel: str = ""
    task: str = ""
    target: str = ""
    generation: str = ""
    backend: str = "simulator"  # simulator | neuron | neuron-sdk (the toolchain that ran it)
    sandbox: str = ""  # bwrap | unsandboxed | in-process
    runner: str = "local"  # local, or the runner's URL
    problems: list[ProblemInfo] = Field(default_factory=list)
    stderr: str = ""
    seconds: float = 0.0
    cached: bool = False

    def problem_list(self) -> list[Problem]:
        return [p.to_problem() for p in self.problems]


class CompileResult(_Result):
    op: Literal["compile"] = "compile"
    compiled: bool = False
    stage: Stage = "none"
    kernel_name: str = ""


class KernelLaunch(_Model):
    """One launch of a kernel of the simulated file (a task-less run may launch several kernels, or one many
    times): the arguments it was given (one per parameter, in signature order) and its outputs."""

    kernel_name: str
    inputs: list[ArgSpec] = Field(default_factory=list)
    grid: list[int] = Field(default_factory=list)
    outputs: list[OutputSummary] = Field(default_factory=list)
    completed: bool = True  # False: the launch stopped with an error (its inputs are still known)


class SimulateResult(_Result):
    """One simulated run. With a task: the kernel on the task's inputs (``via`` "task"). Without one
    (``taskless/``): what ran — ``via`` "main" (the file's ``__main__`` driver, whose own assertions are the
    verdict), "test" (``via_test``, a pytest test of the workspace), "shapes" (inputs from shape lines) or
    "none" (no inputs) — and each kernel of the file it launched (``launches``; ``kernel_name`` / ``inputs``
    are the first of them); ``tried``: sources passed over because they launched no kernel of the file.
    ``via`` / ``via_test`` / ``self_reported`` of a task-less result are the parent's (what it asked a worker
    to run), never the worker's reply."""

    op: Literal["simulate"] = "simulate"
    ran: bool = False
    via: Via = "task"
    via_test: str = ""  # "test_add.py::test_add" when via is "test"
    # the verdict and figures came from a process the file's own code ran in (its ``__main__`` driver, the test
    # that imports it, its shape lines' module): the file could have written them ("self-reported by the file")
    self_reported: bool = False
    launches: list[KernelLaunch] = Field(default_factory=list)
    tried: list[str] = Field(default_factory=list)
    kernel_name: str = ""
    inputs: list[ArgSpec] = Field(default_factory=list)
    outputs: list[OutputSummary] = Field(default_factory=list)
    grid: list[int] = Field(default_factory=list)
    peak_sbuf_bytes: int = 0
    peak_psum_bytes: int = 0
    instructions: int = 0
    trace: list[TraceEntry] = Field(default_factory=list)
    estimate: CostEstimate | None = None  # the cost model's (always "estimated", never a measurement)

    @property
    def compiled(self) -> bool:
        return self.ran


class VerifyResult(_Result):
    op: Literal["verify"] = "verify"
    compiled: bool = False
    correct: bool = False
    stage: Stage = "none"
    seeds: list[SeedFigures] = Field(default_factory=list)
    atol: float = 0.0
    rtol: float = 0.0
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    mismatches: int = 0
    peak_sbuf_bytes: int = 0
    peak_psum_bytes: int = 0
    trace: list[TraceEntry] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)  # e.g. "speedup_over_10x", "shape_sweep_failed"
    estimate: CostEstimate | None = None  # the cost model's estimate of the first seed's launch


class BaselineResult(_Result):
    op: Literal["baseline"] = "baseline"
    label: str = ""  # torch-neuronx | cpu | ... : what ran the task's reference
    latency: Latency = Field(default_factory=Latency)


class ProfileResult(VerifyResult):
    op: Literal["profile"] = "profile"  # type: ignore[assignment]
    latency: Latency = Field(default_factory=Latency)
    baseline: BaselineResult | None = None
    speedup: float | None = None


JobResult = Annotated[Union[CompileResult, SimulateResult, VerifyResult, ProfileResult, BaselineResult],
                      Field(discriminator="op")]


class TaskDescription(_Model):
    """The task's inputs (seed 0) and settings, for prompts and hovers."""

    task: str
    inputs: list[ArgSpec] = Field(default_factory=list)
    problems: list[ProblemInfo] = Field(default_factory=list)
    kernel_name: str | None = None
    grid: list[int] = Field(default_factory=list)
    lnc: int | None = None
    target: str | None = None
    tolerance: dict[str, float] = Field(default_factory=dict)
    reference: str = ""
    allow_input_mutation: bool = False
    sandbox: str = ""

    def problem_list(self) -> list[Problem]:
        return [p.to_problem() for p in self.problems]


# ---------------------------------------------------------------- requests (what a client sends a runner)


class SourceFile(_Model):
    """A file of the job: the kernel, its task, or a sibling module the kernel imports."""

    name: str = Field(description="plain module file name, e.g. 'kernel.py'")
    text: str = Field(max_length=MAX_SOURCE_CHARS)

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        if not _FILE_NAME.match(v):
            raise ValueError("a file name is a Python module name ending in .py, with no folder")
        return v


class JobRequest(_Model):
    """One job for a runner. ``task`` None means the kernel file is its own task."""

    model_config = ConfigDict(extra="forbid")

    op: Op
    kernel: SourceFile
    task: SourceFile | None = None
    modules: list[SourceFile] = Field(default_factory=list, max_length=MAX_MODULES)
    kernel_name: str | None = Field(None, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    target: Literal["trn1", "trn2", "trn3"] | None = None
    seeds: int = Field(3, ge=1, le=MAX_SEEDS)
    seed: int = Field(0, ge=0, le=2**31 - 1)  # simulate: the one seed to draw inputs with
    warmup: int = Field(5, ge=0, le=100)
    iterations: int = Field(50, ge=1, le=1000)  # the most timed iterations (profile stops earlier at 1 % spread)
    time_budget_s: float = Field(30.0, gt=0, le=900)
    timeout_s: float = Field(120.0, gt=0, le=900)
    sweep: bool = False  # verify also on the task's unseen shapes (SWEEP in the task), when it has them
    nonce: str | None = Field(None, max_length=128)  # echoed in the job's status, for clients that correlate

    def files(self) -> list[SourceFile]:
        out = [self.kernel] + ([self.task] if self.task else []) + list(self.modules)
        names = [f.name for f in out]
        if len(set(names)) != len(names):
            raise ValueError(f"file names must be distinct: {names}")
        return out


class ProgressEvent(_Model):
    """One step of a job, streamed as a server-sent event."""

    id: str
    state: JobState
    message: str = ""
    seq: int = 0


class JobStatus(_Model):
    id: str
    op: Op
    state: JobState
    nonce: str | None = None
    submitted_at: float
    started_at: float | None = None
    finished_at: float | None = None
    result: JobResult | None = None
    error: str | None = None  # why a failed / cancelled job has no result
    cached: bool = False
    core_id: int | None = None
    events: list[ProgressEvent] = Field(default_factory=list)


class Limits(_Model):
    max_body_bytes: int
    max_source_chars: int = MAX_SOURCE_CHARS
    max_seeds: int = MAX_SEEDS
    max_timeout_s: float = 900.0
    queue_size: int
    workers: int
    rate_per_minute: int
    batch_max: int = 64


class Capabilities(_Model):
    backend: Literal["neuron", "simulator"]
    version: str
    sdk_version: str | None = None
    nki_version: str | None = None
    generations: list[str] = Field(default_factory=list)  # classic | new
    targets: list[str] = Field(default_factory=list)
    neuron_cores: int = 0
    sandbox: str = ""
    latency: LatencyKind = "not measured"
    cluster: str | None = None
    limits: Limits


class Health(_Model):
    ok: bool = True
    backend: str = ""


class ErrorBody(_Model):
    """Every non-2xx answer of the runner."""

    error: str
    detail: Any = None
