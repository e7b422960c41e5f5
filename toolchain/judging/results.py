"""From the toolchain's plain results to the typed protocol (``protocol.py``), in the parent process.

The workers write plain JSON (they do not import pydantic: their start-up time matters); ``parse``
validates it into a model, and a reply that does not validate becomes a ``sim_worker_crash``
problem of an otherwise empty result — never an exception. ``verify_result`` finishes a
verification: ``stage``, the source line of each seed's first mismatch (from the kernel's store log,
``sim/stores.py``), and the hidden seeds, which are labelled by position (visible seeds ``0..n-1``
keep their numbers; label ``n + k`` is the ``k``-th hidden seed) and reported with ``seed=None``,
``hidden=True``, no first mismatch and a generic message, so neither their values nor their inputs
leave the parent. ``compile_result`` and ``profile_result`` derive the other ops' results from a
verification; ``estimate_latency`` is the cost model's seam.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from nki_agent.toolchain.facts.errors import Problem, SourceLocation
from nki_agent.toolchain.protocol.jobs import (
    ArgSpec,
    CompileResult,
    Latency,
    OutputSummary,
    ProblemInfo,
    ProfileResult,
    SeedFigures,
    SimulateResult,
    Stage,
    VerifyResult,
)

SEED_BOUND = 2**31 - 1
M = TypeVar("M", bound=BaseModel)


def draw_hidden(n: int, visible: int) -> list[int]:
    """``n`` distinct secret seeds, none of them a visible one (``0..visible-1``)."""
    out: list[int] = []
    while len(out) < max(0, n):
        s = secrets.randbelow(SEED_BOUND)
        if s >= visible and s not in out:
            out.append(s)
    return out


def crash(path: str, message: str) -> ProblemInfo:
    """The problem of a worker reply (or stream) that cannot be believed."""
    return ProblemInfo.of(Problem("sim_worker_crash", message, location=SourceLocation(path, 1) if path else None))


def parse(model: type[M], data: Any, fallback: Mapping[str, Any], path: str, what: str = "worker") -> M:
    """``data`` validated into ``model``; if it does not validate, ``fallback`` with a ``sim_worker_crash``."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        errors = e.errors()
        where = ".".join(str(x) for x in errors[0]["loc"]) if errors else ""
        why = errors[0]["msg"] if errors else str(e)
        message = f"the {what}'s reply does not match the result protocol ({where or 'reply'}: {why})"
        return model.model_validate(dict(fallback, problems=[crash(path, message[:2000]).model_dump()]))


def stage_of(compiled: bool, correct: bool) -> Stage:
    return "correct" if correct else "compiled" if compiled else "none"


def verify_result(data: Mapping[str, Any], visible: int, lines: Mapping[int, int] | None = None,
                  sandbox: str | None = None) -> VerifyResult:
    """A verification's result dict (``verify.VerifyResult.as_dict`` form) as the model: validated,
    staged, first-mismatch lines filled in, hidden seeds (labels >= ``visible``) masked."""
    base = {k: data[k] for k in ("kernel", "task", "target") if isinstance(data.get(k), str)}
    res = parse(VerifyResult, dict(data), base, str(data.get("kernel", "")), "kernel worker")
    for i, s in enumerate(res.seeds):
        if s.seed is not None and s.first_mismatch is not None and lines and s.seed in lines:
            s.first_mismatch.line = lines[s.seed]
        if s.seed is not None and s.seed >= visible:
            if not s.correct and not s.mismatches and s.message:
                _hide_error(res, s.message)
                s.message = "the kernel raised an error on it"
            res.seeds[i] = hide(s)
    res.stage = stage_of(res.compiled, res.correct)
    if sandbox is not None:
        res.sandbox = sandbox
    return res


def _hide_error(res: VerifyResult, message: str) -> None:
    """An error a hidden seed raised (an out-of-range indirect index, ...) says its code only: its message and
    its place can depend on that seed's values, which nobody reading the result may learn bit by bit."""
    for i, p in enumerate(res.problems):
        if p.message == message:
            loc = p.location.model_copy(update={"line": 1, "column": 1, "end_line": None, "end_column": None}) \
                if p.location is not None else None
            res.problems[i] = p.model_copy(update={
                "message": f"the kernel raised {p.code} on a hidden seed (where and why depend on that seed's "
                           "values and are not shown); the visible seeds ran without it",
                "location": loc, "related": []})


def hide(s: SeedFigures) -> SeedFigures:
    """A hidden seed's figures: its verdict and error sizes, never its number, inputs or first mismatch."""
    if s.correct:
        message = ""
    elif s.mismatches:
        message = f"a hidden seed fails: {s.mismatches} of {s.elements} elements differ"
    else:
        message = "a hidden seed fails" + (f": {s.message}" if s.message and not s.first_mismatch else "")
    return SeedFigures(seed=None, hidden=True, correct=s.correct, max_abs_error=s.max_abs_error,
                       max_rel_error=s.max_rel_error, mismatches=s.mismatches, elements=s.elements,
                       kernel_seconds=s.kernel_seconds, reference_seconds=s.reference_seconds, message=message[:2000])


def compile_result(v: VerifyResult, kernel_name: str | None = None) -> CompileResult:
    """A compile is a launch on seed 0's inputs: compiled = it ran and no problem is an error."""
    compiled = v.compiled and not any(p.severity == "error" for p in v.problems)
    common = v.model_dump(include={"kernel", "task", "target", "generation", "backend", "sandbox", "runner",
                                   "problems", "stderr", "seconds", "cached"})
    return CompileResult.model_validate(dict(common, compiled=compiled, stage="compiled" if compiled else "none",
                                             kernel_name=kernel_name or ""))


def profile_result(v: VerifyResult) -> ProfileResult:
    """The verification's figures plus the latency (``estimate_latency``; a device runner measures it)."""
    out = ProfileResult.model_validate(dict(v.model_dump(), op="profile"))
    out.latency = estimate_latency(out)
    if out.correct and out.latency.kind != "not measured":
        out.stage = "latency"
    return out


def estimate_latency(result: VerifyResult) -> Latency:
    """The cost model's estimate of the kernel's latency (``result.estimate``) as a ``Latency`` of kind
    "estimated" — "not measured" when there is no estimate. Never a measurement."""
    est = result.estimate
    if est is None:
        return Latency(kind="not measured", source="")
    return Latency(kind="estimated", source="cost model", p50_us=est.latency_us, target=est.target)


def simulate_result(v: VerifyResult, run: Mapping[str, Any]) -> SimulateResult:
    """A simulation through the verdict's path (``judge.simulate``) as a ``SimulateResult``: the executor's
    figures (``v``, no seed judged) and the first seed's arrays (``run``: ``inputs``, ``outputs``) summarised."""
    import numpy as np

    from nki_agent.toolchain.facts import dtypes

    def summary(a: Any) -> OutputSummary:
        arr = np.asarray(a)
        f = arr.astype(np.float64) if arr.size else arr
        finite = np.isfinite(f) if arr.size else f
        ok = bool(arr.size) and bool(finite.any())
        return OutputSummary(shape=list(arr.shape), dtype=dtypes.name(arr.dtype),
                             min=float(f[finite].min()) if ok else None, max=float(f[finite].max()) if ok else None,
                             nan=int(np.isnan(f).sum()) if arr.size else 0)

    common = v.model_dump(include={"kernel", "task", "target", "generation", "backend", "sandbox", "runner",
                                   "problems", "stderr", "seconds", "cached", "peak_sbuf_bytes", "peak_psum_bytes",
                                   "trace", "estimate"})
    inputs = [ArgSpec(shape=list(np.shape(x)), dtype=dtypes.name(np.asarray(x).dtype)) for x in run.get("inputs", [])]
    outputs = [summary(o) for o in run.get("outputs", []) if o is not None]
    est = v.estimate
    return SimulateResult.model_validate(dict(common, ran=v.compiled and "outputs" in run, inputs=inputs,
                                              outputs=outputs, instructions=est.instructions if est else 0))
