"""Kernel Forge compatibility: its reward server's routes and bodies, answered by this runner's jobs.

Kernel Forge (aws-samples/sample-ATX-custom-NKI-Agent, ``infrastructure/reward_server/``) serves
``POST /reward`` ``{op, ...}``, ``POST /reward/batch`` ``{"items": [...]}`` → ``{"results": [...]}``,
``GET /health`` and ``GET /health/deep``. Its MCP tools, agent and training scripts talk to it; they
can point at this runner instead. Each request becomes a typed ``JobRequest`` (the kernel file, a task
module generated here from ``input_specs`` + ``reference_source``), goes through ``app.state.submit``
like any other job (queue, cache, jail, hidden seed) and is answered with Kernel Forge's fields.

Compatible
  * ops compile | verify | profile | baseline with Kernel Forge's field names, defaults and ranges:
    ``kernel_source`` ≤ 256 KB defining ``kernel_name`` (default ``nki_kernel``, identifier ≤ 64 chars);
    ``input_specs`` ``[{shape: [int > 0], dtype: float16|float32|bfloat16|int8|int16|int32}]`` (compile's
    default ``[{[128, 256], float32}]``; required by the others); ``reference_source`` defining
    ``reference(*args)`` (like its baseline, ``Model`` or ``forward`` also do); atol = rtol = 1e-3;
    ``warmup_runs`` 5 (0-100), ``measure_runs`` 50 (1-1000). Unknown fields (the MCP's
    ``optimization_level``) are ignored, as there.
  * the reference is called as Kernel Forge calls it: torch tensors of the spec's dtypes, under
    ``torch.no_grad()``; the kernel gets NumPy arrays; every response field is present (null when
    unknown), and verify's ``error`` is null exactly when the kernel ran without an error (its agent
    reads that as "compiled"). An unknown op (also ``skill``, not served here) answers ``{"error": "unknown op: …"}``
    with HTTP 200; a batch answers in order.

Different, and why
  * Malformed bodies of known ops get 422 with ``ErrorBody`` (Kernel Forge answers 200 with an error in
    the op's shape), a batch of more than 64 items 422 (there 400), a body that is JSON but not an
    object 422. A body that is not JSON (bad syntax or encoding, an integer beyond 4300 digits) or
    nests lists / objects deeper than ``forge_bodies.MAX_DEPTH`` (32) levels gets 400, never a server error: it is
    parsed off the event loop and its depth measured without recursion. A batch is checked whole before anything runs; its jobs run concurrently on the runner's
    slots (Kernel Forge runs them one after another), and beyond this token's share of the queue
    the next item waits for the batch's oldest job to end.
  * Auth: the runner's bearer token on ``/reward*`` and ``/health/deep`` (Kernel Forge trusts the network).
    ``/health`` stays unauthenticated like ``/healthz``: it says only that the process is up.
    ``/health/deep`` runs a trivial verify job in the jail (Kernel Forge only imports modules), so it
    costs a job: it needs the token, counts against the rate limit and answers 503 unless the job
    really ran jailed and was judged correct. Every batch item counts against the rate limit.
  * Inputs are drawn per seed by the task's RNG (``np.random`` seeded by the toolchain), bfloat16 as
    real bfloat16 (``ml_dtypes``; Kernel Forge draws float32), integers uniformly in [-128, 127] (its
    verify truncates normal draws, mostly zeros). verify judges ≥ 3 seeds plus a hidden one (there one
    seed, 42); ``mismatched_elements`` / ``total_elements`` count over all judged seeds; ``seeds`` says
    how many. Input specs are capped at 8 dimensions and 256 MiB in all (the jail's memory).
  * Latency: ``latency_mean_us`` is a true mean (Kernel Forge reports its p50 there), plus
    ``latency_std_us`` (its MCP promises it, its server never sends it) and ``latency_kind``
    (measured | estimated | not measured). When not measured, every latency field is null and
    ``success`` false with the reason in ``error``: numbers are never invented. ``warmup_runs`` /
    ``measure_runs`` are the counts that ran when measured (profiling may stop early once stable).
    ``flops_utilization`` stays null. baseline also carries ``baseline_time_s`` (Kernel Forge's name).
  * ``neff_path`` is null (nothing is persisted; the simulator makes no NEFF); compile's ``returncode``
    is 0 / 1 (compiled or not), null when the job never ran. Times are the job's run time, queueing
    excluded. Messages name ``kernel_source`` / ``reference_source`` lines instead of temp paths.
  * Extra fields on every answer: ``job_id`` (``GET /v1/jobs/{id}`` has the full typed result),
    ``core_id``, ``nki_version``, ``sandbox``. Extensions of the requests: verify's ``seeds`` (visible
    seeds, default 3), profile's ``reference_source`` (then profile also judges the kernel and answers
    ``correct``; without it nothing is judged, as in Kernel Forge, and ``correct`` is null). The
    backends time only kernels judged correct, so a profile without reference first simulates the
    kernel once (a ``simulate`` job) to learn its output shapes, then is judged against a reference
    that accepts any finite output of those shapes: a kernel that does not run, or leaves outputs
    unwritten (NaN), is not timed.
  * The files of a job have fixed names (``forge_kernel.py``, ``forge_task.py``), never ``kernel_name``:
    a kernel named ``numpy`` must not shadow an import of the task. ``reference_source`` lives inside
    the task file, which the kernel's jail cannot open.
"""

from __future__ import annotations

import math
import os
import re
import uuid
from collections import deque
from typing import Any, ClassVar

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from nki_agent.toolchain.protocol.jobs import (
    ErrorBody,
    JobRequest,
    JobStatus,
    Latency,
    ProblemInfo,
    SimulateResult,
    SourceFile,
)
from .app import SYNC_WAIT_S, Context, HTTPError
from .forge_bodies import (
    KERNEL_FILE,
    MAX_BATCH,
    REFERENCE_FILE,
    REQUESTS,
    TASK_FILE,
    BodyError,
    ForgeAnswer,
    ForgeBaselineAnswer,
    ForgeBaselineRequest,
    ForgeBatchAnswer,
    ForgeBatchRequest,
    ForgeCompileAnswer,
    ForgeDeepHealth,
    ForgeHealth,
    ForgeProfileAnswer,
    ForgeProfileRequest,
    ForgeRequest,
    ForgeUnknownOp,
    ForgeVerifyAnswer,
    ForgeVerifyRequest,
    decode,
    job_request,
    needs_outputs,
    parse,
)

_IN_REFERENCE = re.compile(r" \(" + re.escape(REFERENCE_FILE) + r", line (\d+)\)")
MAX_LIST = 30  # errors / warnings kept (Kernel Forge's cap); stderr_tail keeps 20 lines
DEEP_HEALTH_WAIT_S = 120.0


# ---------------------------------------------------------------- typed results → Kernel Forge answers


def _finite(x: float | None) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


class _Folder:
    """Names the job's files as the client knows them and hides the runner's temp paths."""

    NAMES: ClassVar[dict[str, str]] = {KERNEL_FILE: "kernel_source", TASK_FILE: "task",
                                       REFERENCE_FILE: "reference_source"}

    def __init__(self, status: JobStatus) -> None:
        kernel = getattr(status.result, "kernel", "") or ""
        self.folder = os.path.dirname(kernel) if os.path.isabs(kernel) else ""

    def text(self, s: str) -> str:
        if self.folder:
            s = s.replace(self.folder + os.sep, "")
        return re.sub(r"/\S*/job-[0-9a-f]{8}-[^/\s]*/(?:(?:kernel|task)/)?", "", s)  # layout.py's two folders

    def problem(self, p: ProblemInfo) -> str:
        where, message = "", self.text(p.message)
        if p.location is not None:
            name = os.path.basename(p.location.path)
            where = f"{self.NAMES.get(name, self.text(p.location.path))}:{p.location.line}: "
        inner = _IN_REFERENCE.search(message)  # a syntax error of the reference, raised where the task compiles it
        if inner:
            where, message = f"reference_source:{inner.group(1)}: ", message.replace(inner.group(0), "")
        return f"{p.severity}: {where}[{p.code}] {message}"

    def problems(self, status: JobStatus, severity: str) -> list[str]:
        found = getattr(status.result, "problems", None) or []
        return [self.problem(p) for p in found if p.severity == severity]


def _reason(status: JobStatus, folder: _Folder) -> str | None:
    """Why the job produced no usable answer: its error problems, or why it has no result."""
    if status.result is None:
        if status.state in ("queued", "running"):
            return (f"the job is still {status.state} after {SYNC_WAIT_S:.0f} s; its result will be at "
                    f"GET /v1/jobs/{status.id}")
        return status.error or f"the job ended {status.state} without a result"
    errors = folder.problems(status, "error")
    return "\n".join(errors)[:1500] if errors else None


def _seconds(status: JobStatus) -> float:
    secs = getattr(status.result, "seconds", 0.0) or 0.0
    if not secs and status.started_at and status.finished_at:
        secs = status.finished_at - status.started_at
    return round(float(secs), 2)


def _extras(status: JobStatus, nki_version: str | None) -> dict[str, Any]:
    latency = getattr(status.result, "latency", None)
    core = status.core_id if status.core_id is not None else getattr(latency, "core_id", None)
    return {"job_id": status.id, "core_id": core, "nki_version": nki_version,
            "sandbox": getattr(status.result, "sandbox", None) or None}


def compile_answer(status: JobStatus, nki_version: str | None = None) -> ForgeCompileAnswer:
    folder, r = _Folder(status), status.result
    ok = bool(getattr(r, "compiled", False))
    errors = folder.problems(status, "error")
    if r is None or (not ok and not errors):
        errors = errors or [f"error: {_reason(status, folder) or 'the kernel did not compile'}"]
    stderr = folder.text(getattr(r, "stderr", "") or "").splitlines()
    return ForgeCompileAnswer(success=ok, neff_path=None, returncode=None if r is None else (0 if ok else 1),
                              errors=errors[-MAX_LIST:], warnings=folder.problems(status, "warning")[-MAX_LIST:],
                              stderr_tail=stderr[-20:], compile_time_s=_seconds(status),
                              **_extras(status, nki_version))


def verify_answer(status: JobStatus, req: ForgeVerifyRequest, nki_version: str | None = None) -> ForgeVerifyAnswer:
    folder, r = _Folder(status), status.result
    ran = bool(getattr(r, "compiled", False))
    seeds = list(getattr(r, "seeds", None) or [])
    figures: dict[str, Any] = {}
    if ran and seeds:
        figures = {"max_abs_error": _finite(getattr(r, "max_abs_error", None)),
                   "max_rel_error": _finite(getattr(r, "max_rel_error", None)),
                   "mismatched_elements": sum(s.mismatches for s in seeds),
                   "total_elements": sum(s.elements for s in seeds)}
    error = _reason(status, folder)
    if r is not None and not ran and not error:
        error = "; ".join(s.message for s in seeds if s.message)[:1500] or "the kernel did not run"
    return ForgeVerifyAnswer(correct=bool(getattr(r, "correct", False)) and ran, **figures,
                             atol=req.atol, rtol=req.rtol,
                             verify_time_s=_seconds(status), error=error, seeds=len(seeds) if ran else 0,
                             **_extras(status, nki_version))


def latency_fields(lat: Latency | None) -> dict[str, Any]:
    """Kernel Forge's latency fields from a typed ``Latency``: all null unless it was measured or estimated."""
    if lat is None or lat.kind == "not measured":
        return {"latency_kind": "not measured"}
    mean = _finite(lat.mean_us)
    out: dict[str, Any] = {"latency_kind": lat.kind, "latency_mean_us": mean, "latency_median_us": _finite(lat.p50_us),
                           "latency_p99_us": _finite(lat.p99_us), "latency_min_us": _finite(lat.min_us),
                           "latency_max_us": _finite(lat.max_us), "latency_std_us": _finite(lat.std_us),
                           "throughput_ops_per_s": 1e6 / mean if mean else None}
    if lat.iterations:
        out.update(measure_runs=lat.iterations, warmup_runs=lat.warmup)
    return out


def profile_answer(status: JobStatus, req: ForgeProfileRequest | ForgeBaselineRequest,
                   nki_version: str | None = None) -> ForgeProfileAnswer:
    """profile and baseline: success means latency figures were obtained (measured or estimated)."""
    folder, r = _Folder(status), status.result
    fields: dict[str, Any] = {"warmup_runs": req.warmup_runs, "measure_runs": req.measure_runs,
                              **latency_fields(getattr(r, "latency", None))}
    numbers = fields.get("latency_mean_us") is not None or fields.get("latency_median_us") is not None
    error = _reason(status, folder)
    judged = req.op == "profile" and req.reference_source is not None
    seeds = list(getattr(r, "seeds", None) or [])
    if error is None and req.op == "profile" and not getattr(r, "compiled", False):
        error = "; ".join(s.message for s in seeds if s.message)[:1500] or "the kernel did not run"
    if error is None and not numbers:
        error = (f"latency not measured: the {getattr(r, 'backend', '') or 'runner'} backend has no timing here "
                 "(latency_kind 'not measured'); every latency field is null")
    common = dict(success=numbers and error is None, error=error, seeds=len(seeds) if judged else 0,
                  correct=bool(getattr(r, "correct", False)) if judged else None,
                  profile_time_s=_seconds(status), **fields, **_extras(status, nki_version))
    if req.op == "baseline":
        backend = getattr(r, "label", "") or getattr(r, "backend", "") or ""
        return ForgeBaselineAnswer(**common, backend=backend, baseline_time_s=common["profile_time_s"])
    return ForgeProfileAnswer(**common)


def _output_shapes(status: JobStatus) -> list[list[int]] | None:
    """The output shapes of a kernel's simulated run, or None when it did not run cleanly."""
    r = status.result
    if not isinstance(r, SimulateResult) or not r.ran or any(p.severity == "error" for p in r.problems):
        return None
    return [list(o.shape) for o in r.outputs]


def answer(req: ForgeRequest, status: JobStatus, nki_version: str | None = None) -> BaseModel:
    if req.op == "compile":
        return compile_answer(status, nki_version)
    if req.op == "verify":
        return verify_answer(status, req, nki_version)
    return profile_answer(status, req, nki_version)


# ---------------------------------------------------------------- routes


def _invalid(errors: list[dict[str, Any]], prefix: tuple[Any, ...]) -> HTTPError:
    detail = [{"loc": ["body", *prefix, *e.get("loc", ())], "msg": str(e.get("msg", ""))} for e in errors][:20]
    return _Invalid(detail)


class _Invalid(HTTPError):
    def __init__(self, detail: list[dict[str, Any]]) -> None:
        super().__init__(422, "invalid request")
        self.detail = detail


def _parse_all(items: list[Any], batch: bool) -> list[ForgeRequest | ForgeUnknownOp]:
    out: list[ForgeRequest | ForgeUnknownOp] = []
    for i, item in enumerate(items):
        prefix: tuple[Any, ...] = ("items", i) if batch else ()
        try:
            out.append(parse(item))
        except ValidationError as e:
            raise _invalid([dict(x) for x in e.errors()], prefix) from None
        except (TypeError, ValueError) as e:
            raise _invalid([{"loc": (), "msg": str(e)}], prefix) from None
    return out


class _Malformed(HTTPError):
    """A body that is not JSON at all, or nested deeper than ``forge_bodies.MAX_DEPTH``: HTTP 400."""

    def __init__(self, msg: str) -> None:
        super().__init__(400, "malformed request body")
        self.detail = [{"loc": ["body"], "msg": msg}]


def _decode(raw: bytes) -> Any:
    try:
        return decode(raw)
    except BodyError as e:
        raise _Malformed(str(e)) from None


async def _body(request: Request) -> Any:
    """The JSON of the body (parsed off the event loop: it may be 4 MiB), or HTTP 400."""
    return await anyio.to_thread.run_sync(_decode, await request.body())


def _schema_of(*models: type[BaseModel]) -> dict[str, Any]:
    refs = [{"$ref": f"#/components/schemas/{m.__name__}"} for m in models]
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": refs[0] if len(refs) == 1 else {"oneOf": refs}}}}}


def _extend_openapi(app: FastAPI) -> None:
    """Put the request models (read by hand, not by FastAPI: an unknown op must answer 200) in the schema."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = original()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        models: list[type[BaseModel]] = [*REQUESTS.values(), ForgeBatchRequest]
        for model in models:
            js = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(js.pop("$defs", {}))
            components[model.__name__] = js
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def install(app: FastAPI, ctx: Context) -> None:
    """Add Kernel Forge's routes to the runner's app (``create_app`` calls this)."""
    caller = app.state.caller
    errors_422: dict[int | str, dict[str, Any]] = {400: {"model": ErrorBody}, 422: {"model": ErrorBody},
                                                   401: {"model": ErrorBody}, 429: {"model": ErrorBody},
                                                   503: {"model": ErrorBody}}

    @app.exception_handler(_Invalid)
    async def _invalid_body(request: Request, exc: _Invalid) -> JSONResponse:
        return JSONResponse(ErrorBody(error=exc.error, detail=exc.detail).model_dump(mode="json"), status_code=422)

    @app.exception_handler(_Malformed)
    async def _malformed_body(request: Request, exc: _Malformed) -> JSONResponse:
        return JSONResponse(ErrorBody(error=exc.error, detail=exc.detail).model_dump(mode="json"), status_code=400)

    def nki_version() -> str | None:
        return ctx.manager.backend.info().nki_version

    async def run(parsed: list[ForgeRequest | ForgeUnknownOp], owner: str) -> list[BaseModel]:
        """Submit the known-op items in order and answer each in its place. When the queue (or this
        token's share of it) is full, the next item waits for the batch's oldest job to end; a failure
        cancels the batch's unfinished jobs."""
        out: list[BaseModel] = list(parsed)
        pending: deque[tuple[int, ForgeRequest, JobStatus]] = deque()
        version = nki_version()

        async def settle_oldest() -> None:
            i, req, st = pending.popleft()
            out[i] = answer(req, await ended(st, owner), version)

        async def submit(job: JobRequest) -> JobStatus:
            while True:
                try:
                    return await anyio.to_thread.run_sync(app.state.submit, job, owner)
                except HTTPError as e:  # a full queue says Retry-After; a refusal does not
                    if e.status != 503 or "Retry-After" not in e.headers or not pending:
                        raise
                    await settle_oldest()

        try:
            for i, p in enumerate(parsed):
                if isinstance(p, ForgeUnknownOp):  # runs nothing: its answer is itself
                    continue
                job = job_request(p)
                if needs_outputs(p):  # a profile without reference: first learn the kernel's output shapes
                    simulated = await submit(job_request(p, op="simulate"))
                    pending.append((i, p, simulated))
                    simulated = await ended(simulated, owner)
                    pending.pop()
                    shapes = _output_shapes(simulated)
                    if shapes is None:
                        out[i] = answer(p, simulated, version)
                        continue
                    job = job_request(p, outputs=shapes)
                pending.append((i, p, await submit(job)))
            while pending:
                await settle_oldest()
        except BaseException:
            for _, _, st in pending:
                ctx.manager.cancel(st.id, owner)
            raise
        return out

    async def ended(status: JobStatus, owner: str) -> JobStatus:
        if status.state in ("queued", "running"):
            return await app.state.wait_for(status.id, owner, SYNC_WAIT_S)
        return status

    def reply(model: BaseModel, status: int = 200) -> JSONResponse:
        return JSONResponse(model.model_dump(mode="json"), status_code=status)

    @app.get("/health", response_model=ForgeHealth, tags=["kernel-forge"])
    def health() -> ForgeHealth:
        return ForgeHealth(status="ok")

    @app.get("/health/deep", response_model=ForgeDeepHealth, tags=["kernel-forge"],
             responses={503: {"model": ForgeDeepHealth}, 401: {"model": ErrorBody}, 429: {"model": ErrorBody}})
    async def health_deep(owner: str = Depends(caller)) -> JSONResponse:
        app.state.admit(owner, 1)
        out = await deep_health(app, ctx, owner)
        return reply(out, 200 if out.status == "ok" else 503)

    @app.post("/reward", response_model=ForgeAnswer, responses=errors_422, tags=["kernel-forge"],
              openapi_extra=_schema_of(*REQUESTS.values()))
    async def reward(request: Request, owner: str = Depends(caller)) -> JSONResponse:
        [parsed] = _parse_all([await _body(request)], batch=False)
        app.state.admit(owner, 1)
        [result] = await run([parsed], owner)
        return reply(result)

    @app.post("/reward/batch", response_model=ForgeBatchAnswer, responses=errors_422, tags=["kernel-forge"],
              openapi_extra=_schema_of(ForgeBatchRequest))
    async def reward_batch(request: Request, owner: str = Depends(caller)) -> JSONResponse:
        body = await _body(request)
        items = body.get("items") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise _invalid([{"loc": ("items",), "msg": "items must be a list"}], ())
        if len(items) > MAX_BATCH:
            raise _invalid([{"loc": ("items",), "msg": f"batch size {len(items)} exceeds {MAX_BATCH}"}], ())
        parsed = _parse_all(items, batch=True)
        if parsed:
            app.state.admit(owner, len(parsed))
        results = await run(parsed, owner)
        return JSONResponse({"results": [r.model_dump(mode="json") for r in results]})

    _extend_openapi(app)


# ---------------------------------------------------------------- /health/deep

_HEALTH_KERNEL = '''import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def nki_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.multiply(nl.load(x), 2.0))
    return out
'''

_HEALTH_TASK = '''import numpy as np


def get_inputs():
    return [np.random.standard_normal((128, 64)).astype(np.float32)]


def reference(x):
    return x * 2.0
'''


async def deep_health(app: FastAPI, ctx: Context, owner: str) -> ForgeDeepHealth:
    """A trivial verify job (a fresh one: a nonce keeps it out of the cache) must run jailed and pass."""
    import importlib.util

    imports = {m: "ok" if importlib.util.find_spec(m) else "missing" for m in ("numpy", "torch", "ml_dtypes")}
    info = ctx.manager.backend.info()
    out = ForgeDeepHealth(status="degraded", backend=info.name, imports=imports)
    kernel = _HEALTH_KERNEL + f"# health check {uuid.uuid4().hex}\n"
    req = JobRequest.model_validate({"op": "verify", "kernel": SourceFile(name="health_kernel.py", text=kernel),
                                     "task": SourceFile(name="health_task.py", text=_HEALTH_TASK), "seeds": 1,
                                     "timeout_s": 60.0})
    try:
        status = await anyio.to_thread.run_sync(app.state.submit, req, owner)
    except HTTPError as e:
        if e.status != 503:
            raise
        out.error = e.error
        return out
    status = await app.state.wait_for(status.id, owner, DEEP_HEALTH_WAIT_S)
    r = status.result
    out.job_id, out.seconds = status.id, _seconds(status)
    out.sandbox = getattr(r, "sandbox", "") or ""
    if status.state in ("queued", "running"):
        ctx.manager.cancel(status.id, owner)
    missing = [m for m, v in imports.items() if v != "ok"]
    if r is None or not getattr(r, "correct", False):
        out.error = _reason(status, _Folder(status)) or "the trivial kernel was judged incorrect"
    elif out.sandbox in ("", "unsandboxed", "in-process"):
        out.error = f"the trivial job did not run in the jail (sandbox: {out.sandbox or 'unknown'})"
    elif missing:
        out.error = f"missing on this runner: {', '.join(missing)} (the generated tasks import them)"
    else:
        out.status = "ok"
    return out
