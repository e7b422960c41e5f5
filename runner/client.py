"""``RemoteRunner``: the toolchain's ``Runner`` seam over HTTP, and the runner's raw job API for scripts.

``toolchain.runner.use(RemoteRunner(url))`` makes every tool (CLI, language server, fix agent) run its
compile / simulate / verify / profile jobs on a remote runner (``runner/app.py``); callers do not
change. One job: the kernel, its task and the sibling modules they import are read here
(``bundle.py``), sent as one ``JobRequest`` (with the task's own bundle: ``layout.BundledJobRequest``) to ``POST /v1/jobs``, followed through the job's
server-sent events (``GET /v1/jobs/{id}/events``; polling ``GET /v1/jobs/{id}`` when the stream is
unavailable, e.g. behind a buffering proxy) and answered with the job's typed result, whose paths
are mapped back to the client's own files and whose ``runner`` is the runner's URL. A set ``cancel``
event deletes the job (``DELETE /v1/jobs/{id}``) and answers ``sim_cancelled`` at once. Each job
carries a fresh nonce: when the answer to a submission is lost after it was sent, the job is found
again (``GET /v1/jobs?nonce=``) instead of failing or running twice.

``describe`` has no remote route: it only needs the task's input shapes, so it runs on this machine
(``LocalRunner``, in the local jail).

Failures of the transport are exceptions, failures of the user's code are results (as locally):
the runner cannot be reached (refused, timed out, dropped) → ``RunnerUnavailable`` (URL and reason,
the one status message an editor shows); 401 → ``RunnerRefused("wrong or missing token")``; 429 /
503 with Retry-After are retried after the server's delay, a bounded number of times, then
``RunnerBusy``; a 503 without Retry-After (the runner refuses untrusted jobs) → ``RunnerRefused``.
The token (argument, else env ``NKI_AGENT_RUNNER_TOKEN``) travels only in the Authorization header:
never in a message, a repr or a log.
"""

from __future__ import annotations

import email.utils
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Self, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from nki_agent import __version__

from nki_agent.toolchain.protocol.jobs import (
    MAX_SEEDS,
    Capabilities,
    CompileResult,
    ErrorBody,
    Health,
    JobRequest,
    JobResult,
    JobStatus,
    Location,
    Op,
    ProblemInfo,
    ProfileResult,
    ProgressEvent,
    SimulateResult,
    TaskDescription,
    VerifyResult,
)
from nki_agent.toolchain.task_discovery import inside

from .bundle import BundleError, bundle, dependencies
from .config import TOKEN_ENV
from .layout import BundledJobRequest

if TYPE_CHECKING:
    from nki_agent.toolchain.isolation.runner import Runner

TERMINAL = ("done", "failed", "cancelled")
DEFAULT_TIMEOUT = 60.0  # seconds, as sandbox.DEFAULT_TIMEOUT (not imported: the client stays light)
MAX_JOB_TIMEOUT_S = 900.0  # JobRequest.timeout_s's bound
KEEPALIVE_S = 10.0  # the runner's SSE keep-alive period (app.EVENT_POLL_S)
CANCEL_CHECK_S = 0.1  # how often a followed job looks at its cancel event

_STATUSES = TypeAdapter(list[JobStatus])
M = TypeVar("M", bound=BaseModel)
R = TypeVar("R", CompileResult, SimulateResult, VerifyResult, ProfileResult)


class RunnerError(Exception):
    """A runner did not do what was asked (the message names the runner's URL and the reason)."""

    def __init__(self, url: str, reason: str, status: int | None = None) -> None:
        super().__init__(f"runner {url}: {reason}")
        self.url, self.reason, self.status = url, reason, status


class RunnerUnavailable(RunnerError):
    """The runner cannot be reached: connection refused, no answer in time, connection dropped.

    ``sent``: the request may have reached the runner (the answer was lost), e.g. a submission the
    runner accepted; ``RemoteRunner`` then finds the job again by its nonce."""

    def __init__(self, url: str, reason: str, status: int | None = None, sent: bool = False) -> None:
        super().__init__(url, reason, status)
        self.sent = sent


class RunnerRefused(RunnerError):
    """The runner refuses this client (401: wrong or missing token) or untrusted jobs (503, no sandbox)."""


class RunnerBusy(RunnerError):
    """The runner stayed rate-limited (429) or full (503) after the bounded retries."""

    def __init__(self, url: str, reason: str, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(url, reason, status)
        self.retry_after = retry_after


class JobFailed(RunnerError):
    """``result()`` of a job that ended without a result (failed or cancelled); ``job`` is its status."""

    def __init__(self, url: str, job: JobStatus) -> None:
        super().__init__(url, f"job {job.id} {job.state}: {job.error or 'no result'}")
        self.job = job


class _Cancelled(Exception):
    pass


class _Deadline(Exception):
    pass


class _NoStream(Exception):
    pass


def _reason(e: httpx.HTTPError) -> str:
    text = str(e) or type(e).__name__
    if isinstance(e, httpx.ConnectError) and "refused" in text.lower():
        return "connection refused"
    return text


def _retry_after(r: httpx.Response) -> float | None:
    value = r.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_of(r: httpx.Response) -> str:
    try:
        return ErrorBody.model_validate_json(r.content).error
    except ValidationError:
        return r.reason_phrase or f"HTTP {r.status_code}"


def _problem(code: str, message: str, path: str) -> ProblemInfo:
    return ProblemInfo(code=code, message=message, location=Location(path=path, line=1))


def _outside(kernel: str, task: str, search_path: Sequence[str], roots: Sequence[str]) -> list[str]:
    """The modules ``kernel`` and ``task`` import from outside ``roots`` (the caller chose those two; not these)."""
    chosen = {os.path.abspath(kernel), os.path.abspath(task)}
    return [d for d in dependencies(kernel, task, search_path) if d not in chosen and not inside(d, roots)]


class RemoteRunner:
    """A runner service at ``url``, as the toolchain's ``Runner`` (``name`` is the URL).

    ``timeout``: seconds for one HTTP exchange (connect, read); a job may take its own timeout
    plus ``queue_timeout`` seconds waiting for a slot. ``transport``: an ``httpx`` transport (tests,
    proxies). ``retries``: how often a 429 / 503 is retried, waiting the server's Retry-After (at
    most ``max_retry_wait`` seconds each). ``roots``: folders (real paths) the modules a job's kernel and task
    import must lie in to be sent — one outside (a symlink out, a folder on ``search_path``) is withheld (None: no
    such limit); the kernel and task themselves are the caller's choice."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None, retries: int = 3, max_retry_wait: float = 30.0,
                 queue_timeout: float = 600.0, roots: Sequence[str] | None = None) -> None:
        self.url = url.rstrip("/")
        self.roots: list[str] | None = list(roots) if roots is not None else None
        self.name = self.url
        self.timeout = timeout
        self.retries = retries
        self.max_retry_wait = max_retry_wait
        self.queue_timeout = queue_timeout
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        headers = {"User-Agent": f"nki-agent/{__version__}", "Accept": "application/json"}
        if token and token.strip():
            headers["Authorization"] = f"Bearer {token.strip()}"
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport,
                                  follow_redirects=False)

    def __repr__(self) -> str:
        return f"RemoteRunner({self.url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ HTTP

    def _check(self, r: httpx.Response) -> None:
        if r.status_code == 401:
            raise RunnerRefused(self.url, "wrong or missing token", 401)
        if r.status_code >= 400:
            raise RunnerError(self.url, f"HTTP {r.status_code}: {_error_of(r)}", r.status_code)

    def _send(self, method: str, path: str, body: BaseModel | None = None, params: dict[str, Any] | None = None,
              cancel: threading.Event | None = None) -> httpx.Response:
        content = body.model_dump_json().encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if body is not None else None
        for attempt in range(self.retries + 1):
            try:
                r = self._http.request(method, path, content=content, params=params, headers=headers)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as e:
                raise RunnerUnavailable(self.url, _reason(e)) from None
            except httpx.TimeoutException:
                raise RunnerUnavailable(self.url, f"no answer within {self.timeout:g} s", sent=True) from None
            except httpx.HTTPError as e:
                raise RunnerUnavailable(self.url, _reason(e), sent=True) from None
            if r.status_code not in (429, 503):
                self._check(r)
                return r
            wait = _retry_after(r)
            if wait is None and r.status_code == 503:
                raise RunnerRefused(self.url, _error_of(r), 503)
            if attempt == self.retries:
                raise RunnerBusy(self.url, f"busy after {self.retries + 1} attempts: {_error_of(r)}",
                                 r.status_code, wait)
            pause = min(wait if wait is not None else 1.0, self.max_retry_wait)
            if cancel is not None:
                if cancel.wait(pause):
                    raise _Cancelled()
            else:
                time.sleep(pause)
        raise AssertionError("unreachable")  # pragma: no cover

    def _parse(self, model: type[M], r: httpx.Response) -> M:
        try:
            return model.model_validate_json(r.content)
        except ValidationError as e:
            raise RunnerError(self.url, f"unexpected answer to {r.request.method} {r.request.url.path}: "
                              f"{e.error_count()} invalid field(s)", r.status_code) from None

    # ------------------------------------------------------------------ the raw job API

    def health(self) -> Health:
        return self._parse(Health, self._send("GET", "/healthz"))

    def capabilities(self) -> Capabilities:
        return self._parse(Capabilities, self._send("GET", "/v1/capabilities"))

    def submit(self, request: JobRequest, wait: float = 0.0, cancel: threading.Event | None = None) -> JobStatus:
        """``POST /v1/jobs``: the accepted job's status (waiting up to ``wait`` s for it to end)."""
        params = {"wait": wait} if wait else None
        return self._parse(JobStatus, self._send("POST", "/v1/jobs", request, params, cancel))

    def find(self, nonce: str) -> list[JobStatus]:
        """``GET /v1/jobs?nonce=``: this token's jobs submitted with ``nonce``, newest first."""
        r = self._send("GET", "/v1/jobs", params={"nonce": nonce})
        try:
            return _STATUSES.validate_json(r.content)
        except ValidationError:
            raise RunnerError(self.url, "unexpected answer to GET /v1/jobs", r.status_code) from None

    def status(self, job_id: str) -> JobStatus:
        return self._parse(JobStatus, self._send("GET", f"/v1/jobs/{job_id}"))

    def cancel(self, job_id: str) -> JobStatus:
        return self._parse(JobStatus, self._send("DELETE", f"/v1/jobs/{job_id}"))

    def events(self, job_id: str) -> Iterator[ProgressEvent]:
        """The job's progress events until it ends (server-sent events, else polling)."""
        for item in self._items(job_id, threading.Event()):
            if isinstance(item, ProgressEvent):
                yield item

    def result(self, job_id: str, wait: float | None = None) -> JobResult:
        """The result of a job, waiting up to ``wait`` s (None: until it ends) — ``TimeoutError`` when it has
        not ended by then, ``JobFailed`` when it ended without a result."""
        status = self.status(job_id)
        deadline = time.monotonic() + (wait if wait is not None else 10 * 365 * 86400.0)
        try:
            status = self._follow(status, deadline, None)
        except _Deadline:
            raise TimeoutError(f"job {job_id} has not ended within {wait:g} s") from None
        if status.state != "done" or status.result is None:
            raise JobFailed(self.url, status)
        return status.result

    # ------------------------------------------------------------------ following a job

    def _items(self, job_id: str, stop: threading.Event) -> Iterator[ProgressEvent | JobStatus]:
        """Progress events, then the final status: from the event stream, else by polling."""
        seq = 0
        try:
            for item in self._stream(job_id, stop):
                if isinstance(item, ProgressEvent):
                    seq = max(seq, item.seq)
                yield item
                if isinstance(item, JobStatus):
                    return
            if stop.is_set():
                return
        except (_NoStream, httpx.HTTPError):
            pass
        interval = 0.05
        while not stop.is_set():
            status = self.status(job_id)
            for e in status.events:
                if e.seq > seq:
                    seq = e.seq
                    yield e
            if status.state in TERMINAL:
                yield status
                return
            stop.wait(interval)
            interval = min(1.0, interval * 1.5)

    def _stream(self, job_id: str, stop: threading.Event) -> Iterator[ProgressEvent | JobStatus]:
        timeout = httpx.Timeout(self.timeout, read=max(self.timeout, 3 * KEEPALIVE_S))
        with self._http.stream("GET", f"/v1/jobs/{job_id}/events", timeout=timeout,
                               headers={"Accept": "text/event-stream"}) as r:
            if r.status_code != 200 or not r.headers.get("content-type", "").startswith("text/event-stream"):
                r.read()
                if r.status_code in (401, 404):
                    self._check(r)
                raise _NoStream()
            event, data = "message", []
            for line in r.iter_lines():
                if stop.is_set():
                    return
                if line:
                    if line.startswith(":"):
                        continue
                    name, _, value = line.partition(":")
                    value = value.removeprefix(" ")
                    if name == "event":
                        event = value
                    elif name == "data":
                        data.append(value)
                    continue
                if data:
                    payload = "\n".join(data)
                    try:
                        if event == "progress":
                            yield ProgressEvent.model_validate_json(payload)
                        elif event == "status":
                            yield JobStatus.model_validate_json(payload)
                            return
                    except ValidationError:
                        raise _NoStream() from None
                event, data = "message", []

    def _follow(self, status: JobStatus, deadline: float, cancel: threading.Event | None) -> JobStatus:
        """Wait for the job to end; ``_Cancelled`` when ``cancel`` is set first, ``_Deadline`` at ``deadline``."""
        if status.state in TERMINAL:
            return status
        box: queue.Queue[JobStatus | BaseException | None] = queue.Queue()
        stop = threading.Event()

        def read() -> None:
            try:
                for item in self._items(status.id, stop):
                    if isinstance(item, JobStatus):
                        box.put(item)
                        return
                box.put(None)
            except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
                box.put(e)

        threading.Thread(target=read, name=f"runner-job-{status.id[:8]}", daemon=True).start()
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _Deadline()
                if cancel is not None and cancel.is_set():
                    raise _Cancelled()
                try:
                    item = box.get(timeout=left if cancel is None else min(left, CANCEL_CHECK_S))
                except queue.Empty:
                    continue
                if isinstance(item, BaseException):
                    raise item
                return item if item is not None else self.status(status.id)
        finally:
            stop.set()

    def _submit_once(self, request: JobRequest, cancel: threading.Event | None) -> JobStatus:
        """Submit; when the answer is lost after sending, the job is found by its nonce (not sent twice)."""
        try:
            return self.submit(request, cancel=cancel)
        except RunnerUnavailable as e:
            if not e.sent or request.nonce is None:
                raise
            try:
                found = self.find(request.nonce)
            except RunnerError:
                raise e from None
            if not found:
                raise
            return found[0]

    def _drop(self, job_id: str) -> None:
        try:
            self.cancel(job_id)
        except RunnerError:
            pass

    # ------------------------------------------------------------------ the Runner protocol

    def _run(self, op: Op, model: type[R], kernel: str, task: str, timeout: float, cancel: threading.Event | None,
             search_path: Sequence[str], protect: Sequence[str], **settings: Any) -> R:
        def failed(code: str, message: str, path: str = kernel) -> R:
            return model(kernel=kernel, task=task, target=settings.get("target") or "", runner=self.url,
                         problems=[_problem(code, message, path)])

        cancelled: Callable[[], R] = lambda: failed("sim_cancelled", "cancelled")
        if cancel is not None and cancel.is_set():
            return cancelled()
        if self.roots is not None:
            protect = list(protect) + _outside(kernel, task, search_path, self.roots)
        try:
            b = bundle(kernel, task, search_path, protect)
        except BundleError as e:
            return failed("sim_bad_input", str(e), e.path)
        try:
            request = BundledJobRequest(op=op, kernel=b.kernel, task=b.task, modules=b.modules,
                                        task_modules=b.task_modules, nonce=uuid.uuid4().hex,
                                        timeout_s=min(max(timeout, 1.0), MAX_JOB_TIMEOUT_S), **settings)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err.get("loc", ()))
            return failed("sim_bad_input", f"the job cannot be sent to the runner: {where}: {err.get('msg', '')}")
        deadline = time.monotonic() + min(timeout, MAX_JOB_TIMEOUT_S) + self.queue_timeout
        try:
            status = self._submit_once(request, cancel)
        except _Cancelled:
            return cancelled()
        except RunnerError as e:
            if e.status not in (400, 422):
                raise
            return failed("sim_bad_input", f"the runner refused the job: {e.reason}")
        try:
            status = self._follow(status, deadline, cancel)
        except _Cancelled:
            self._drop(status.id)
            return cancelled()
        except _Deadline:
            self._drop(status.id)
            return failed("sim_timeout", f"the runner gave no result within {timeout + self.queue_timeout:g} s")
        if status.state == "cancelled":
            return failed("sim_cancelled", status.error or "cancelled on the runner")
        if status.state != "done" or status.result is None:
            return failed("sim_worker_crash", f"the runner could not run the job: {status.error or status.state}")
        result = status.result
        if not isinstance(result, model):
            return failed("sim_worker_crash", f"the runner answered a {result.op} result to a {op} job")
        b.path_map().apply(result)
        result.kernel, result.task, result.runner = kernel, task, self.url
        return result

    def compile(self, kernel: str, task: str, *, target: str | None = None, kernel_name: str | None = None,
                timeout: float = DEFAULT_TIMEOUT, cancel: threading.Event | None = None,
                search_path: Sequence[str] = ()) -> CompileResult:
        return self._run("compile", CompileResult, kernel, task, timeout, cancel, search_path, (),
                         target=target, kernel_name=kernel_name)

    def simulate(self, kernel: str, task: str, *, target: str | None = None, kernel_name: str | None = None,
                 seed: int = 0, timeout: float = DEFAULT_TIMEOUT, cancel: threading.Event | None = None,
                 search_path: Sequence[str] = ()) -> SimulateResult:
        return self._run("simulate", SimulateResult, kernel, task, timeout, cancel, search_path, (),
                         target=target, kernel_name=kernel_name, seed=seed)

    def verify(self, kernel: str, task: str, *, seeds: int = 3, target: str | None = None,
               kernel_name: str | None = None, timeout: float = DEFAULT_TIMEOUT,
               cancel: threading.Event | None = None, search_path: Sequence[str] = (),
               protect: Sequence[str] = (), hidden_seeds: int = 0) -> VerifyResult:
        """``seeds`` is capped at ``protocol.MAX_SEEDS``; ``hidden_seeds`` is the runner's choice (it
        always adds its own secret seeds), so the argument is accepted and not sent."""
        return self._run("verify", VerifyResult, kernel, task, timeout, cancel, search_path, protect,
                         seeds=max(1, min(seeds, MAX_SEEDS)), target=target, kernel_name=kernel_name)

    def profile(self, kernel: str, task: str, *, seeds: int = 3, target: str | None = None,
                kernel_name: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                cancel: threading.Event | None = None, search_path: Sequence[str] = (),
                protect: Sequence[str] = (), hidden_seeds: int = 0, warmup: int = 5,
                iterations: int = 50) -> ProfileResult:
        """As ``verify``, plus the runner's latency (``warmup`` + up to ``iterations`` timed runs)."""
        return self._run("profile", ProfileResult, kernel, task, timeout, cancel, search_path, protect,
                         seeds=max(1, min(seeds, MAX_SEEDS)), target=target, kernel_name=kernel_name,
                         warmup=max(0, min(warmup, 100)), iterations=max(1, min(iterations, 1000)))

    def describe(self, task: str, *, timeout: float = 30.0, search_path: Sequence[str] = ()) -> TaskDescription:
        """Runs on this machine (``LocalRunner``, in the local jail): describing a task needs only its
        input shapes, and the runner has no route for it."""
        from nki_agent.toolchain.isolation.runner import LocalRunner

        return LocalRunner().describe(task, timeout=timeout, search_path=search_path)


if TYPE_CHECKING:  # mypy checks that RemoteRunner is a toolchain Runner

    def _is_a_runner(r: RemoteRunner) -> Runner:
        return r
