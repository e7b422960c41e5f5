"""The runner's HTTP routes (FastAPI): the typed protocol of ``toolchain/protocol/jobs.py`` over HTTP.

``GET /healthz`` (no auth) · ``GET /v1/capabilities`` · ``POST /v1/jobs`` (→ 202 + status; ``?wait=S``
waits up to S seconds) · ``GET /v1/jobs/{id}`` · ``GET /v1/jobs/{id}/events`` (server-sent events) ·
``DELETE /v1/jobs/{id}`` (cancel) · ``POST /v1/verify`` (waits for the result) · ``GET /v1/openapi.json``
· Kernel Forge's ``/reward`` routes (``forge.py``). Every route but ``/healthz`` needs the bearer token
when one is configured (401 otherwise, the same answer for a missing and a wrong token); a job is
visible only to the token that submitted it (404 for others). Bodies are capped (413), submissions
rate-limited per token (429 + Retry-After), the queue bounded (503 + Retry-After). Every error body
is ``ErrorBody``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nki_agent import __version__

from nki_agent.toolchain.protocol.jobs import Capabilities, ErrorBody, Health, JobRequest, JobStatus, Limits
from . import auth
from .config import RunnerConfig
from .jobs import JobManager, QueueFull, Refused
from .layout import BundledJobRequest

PUBLIC_ROUTES = ("/healthz", "/health")  # the only routes answered without the token (/health: forge.py)
SYNC_WAIT_S = 900.0
EVENT_POLL_S = 10.0


class HTTPError(Exception):
    def __init__(self, status: int, error: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(error)
        self.status, self.error, self.headers = status, error, headers or {}


@dataclass
class Context:
    config: RunnerConfig
    manager: JobManager
    limiter: auth.RateLimiter
    cluster: str | None = None


def _error(status: int, error: str, detail: Any = None, headers: dict[str, str] | None = None) -> JSONResponse:
    body = ErrorBody(error=error, detail=detail).model_dump(mode="json")
    return JSONResponse(body, status_code=status, headers=headers)


class BodyLimit:
    """ASGI middleware: a request body larger than ``limit`` bytes is refused with 413 (declared or streamed)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        too_big = _error(413, f"request body over {self.limit} bytes")
        if declared is not None:
            try:
                if int(declared) > self.limit:
                    await too_big(scope, receive, send)
                    return
            except ValueError:
                await _error(400, "bad Content-Length")(scope, receive, send)
                return
        body: list[bytes] = []
        seen = 0
        while True:  # read the whole (capped) body first: a streamed body over the cap never reaches a route
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:
                await too_big(scope, receive, send)
                return
            body.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class AuthGate:
    """ASGI middleware: without the right bearer token every route but ``PUBLIC_ROUTES`` answers 401
    before anything else happens (its body is not read, parsed or size-checked)."""

    def __init__(self, app: ASGIApp, tokens: tuple[str, ...]) -> None:
        self.app, self.tokens = app, tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.tokens and scope.get("path") not in PUBLIC_ROUTES:
            header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
            if not auth.check(self.tokens, auth.bearer(header)):
                await _error(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})(
                    scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(ctx: Context) -> FastAPI:
    app = FastAPI(title="NKI Agent runner", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.ctx = ctx
    tokens = ctx.config.tokens

    @app.exception_handler(HTTPError)
    async def _http_error(request: Request, exc: HTTPError) -> JSONResponse:
        return _error(exc.status, exc.error, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", ""))} for e in exc.errors()][:20]
        return _error(422, "invalid request", detail)

    @app.exception_handler(StarletteHTTPException)
    async def _starlette(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    def caller(request: Request) -> str:
        presented = auth.bearer(request.headers.get("authorization"))
        if not auth.check(tokens, presented):
            raise HTTPError(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})
        return auth.owner_of(presented if tokens else None)

    app.state.caller = caller

    def admit(owner: str, n: int = 1) -> None:
        wait = ctx.limiter.take(owner, n)
        if wait:
            raise HTTPError(429, "rate limit: too many submissions from this token", {"Retry-After": str(int(wait))})

    app.state.admit = admit

    def submit(request: JobRequest, owner: str) -> JobStatus:
        try:
            return ctx.manager.submit(request, owner)
        except QueueFull as e:
            raise HTTPError(503, str(e), {"Retry-After": "5"}) from None
        except Refused as e:
            raise HTTPError(503, str(e)) from None
        except ValueError as e:
            raise HTTPError(422, str(e)) from None

    app.state.submit = submit

    async def wait_for(job_id: str, owner: str, seconds: float) -> JobStatus:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while True:
            status = ctx.manager.get(job_id, owner)
            if status is None:
                raise HTTPError(404, "no such job")
            left = deadline - loop.time()
            if status.state not in ("queued", "running") or left <= 0:
                return status
            await changed(ctx.manager, job_id, min(left, EVENT_POLL_S))

    app.state.wait_for = wait_for

    @app.get("/healthz", response_model=Health)
    def healthz() -> Health:
        return Health(ok=True, backend=ctx.manager.backend.name)

    @app.get("/v1/capabilities", response_model=Capabilities)
    def capabilities(owner: str = Depends(caller)) -> Capabilities:
        info = ctx.manager.backend.info()
        c = ctx.config
        return Capabilities(backend=info.name, version=__version__, sdk_version=info.sdk_version,  # type: ignore[arg-type]
                            nki_version=info.nki_version, generations=list(info.generations),
                            targets=list(info.targets), neuron_cores=info.neuron_cores, sandbox=info.sandbox,
                            latency=info.latency, cluster=ctx.cluster,
                            limits=Limits(max_body_bytes=c.max_body_bytes, queue_size=c.queue_size,
                                        max_timeout_s=c.max_timeout_s,
                                          workers=len(ctx.manager.slots), rate_per_minute=c.rate_per_minute))

    @app.get("/v1/openapi.json")
    def openapi(owner: str = Depends(caller)) -> dict[str, Any]:
        return app.openapi()

    @app.post("/v1/jobs", response_model=JobStatus, status_code=202)
    async def post_job(request: BundledJobRequest, owner: str = Depends(caller),
                       wait: float = Query(0.0, ge=0.0, le=SYNC_WAIT_S)) -> JobStatus:
        admit(owner)
        status = await anyio.to_thread.run_sync(submit, request, owner)
        if wait and status.state in ("queued", "running"):
            status = await wait_for(status.id, owner, wait)
        return status

    @app.post("/v1/verify", response_model=JobStatus)
    async def post_verify(request: BundledJobRequest, owner: str = Depends(caller)) -> JobStatus:
        if request.op != "verify":
            raise HTTPError(422, "POST /v1/verify takes op 'verify' (use POST /v1/jobs for the others)")
        admit(owner)
        status = await anyio.to_thread.run_sync(submit, request, owner)
        return await wait_for(status.id, owner, SYNC_WAIT_S)

    @app.get("/v1/jobs", response_model=list[JobStatus])
    def find_jobs(nonce: str = Query(..., max_length=128), owner: str = Depends(caller)) -> list[JobStatus]:
        """This token's jobs submitted with ``nonce``, newest first (for a client that lost the id)."""
        return ctx.manager.find(owner, nonce)

    @app.get("/v1/jobs/{job_id}", response_model=JobStatus)
    def get_job(job_id: str, owner: str = Depends(caller)) -> JobStatus:
        status = ctx.manager.get(job_id, owner)
        if status is None:
            raise HTTPError(404, "no such job")
        return status

    @app.delete("/v1/jobs/{job_id}", response_model=JobStatus)
    def delete_job(job_id: str, owner: str = Depends(caller)) -> JobStatus:
        status = ctx.manager.cancel(job_id, owner)
        if status is None:
            raise HTTPError(404, "no such job")
        return status

    @app.get("/v1/jobs/{job_id}/events")
    def job_events(job_id: str, owner: str = Depends(caller)) -> StreamingResponse:
        if ctx.manager.get(job_id, owner) is None:
            raise HTTPError(404, "no such job")
        return StreamingResponse(_events(ctx.manager, job_id, owner), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    try:
        from . import forge
    except ImportError:  # pragma: no cover - forge.py is part of the package
        forge = None  # type: ignore[assignment]
    if forge is not None and hasattr(forge, "install"):
        forge.install(app, ctx)

    app.add_middleware(BodyLimit, limit=ctx.config.max_body_bytes)
    app.add_middleware(AuthGate, tokens=tokens)  # outermost: nothing runs for a caller without the token
    return app


async def changed(manager: JobManager, job_id: str, timeout: float) -> None:
    """Return at the job's next event (or end), or after ``timeout``: waits in the event loop, holding
    no thread, however many clients wait."""
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()

    def wake() -> None:
        loop.call_soon_threadsafe(woken.set)

    if not manager.listen(job_id, wake):
        return
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(woken.wait(), timeout)
    finally:
        manager.unlisten(job_id, wake)


async def _events(manager: JobManager, job_id: str, owner: str) -> AsyncIterator[bytes]:
    """``progress`` events as they happen, then one ``status`` event with the final status."""
    seq = 0
    while True:
        events, done = manager.events_after(job_id, seq)
        if not events and not done:
            await changed(manager, job_id, EVENT_POLL_S)
            events, done = manager.events_after(job_id, seq)
        for e in events:
            seq = e.seq
            yield f"id: {e.seq}\nevent: progress\ndata: {e.model_dump_json()}\n\n".encode()
        if done:
            status = manager.get(job_id, owner)
            if status is not None:
                yield f"event: status\ndata: {status.model_dump_json()}\n\n".encode()
            return
        if not events:
            yield b": keep-alive\n\n"

