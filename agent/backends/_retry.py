"""What the LLM backends (``anthropic_backend``, ``openai_backend``) share: retry, backoff, cancellation,
and the parsing of tool-call arguments.

``with_retries`` runs one attempt after another while the attempt raises a ``TransientError``
(rate limit, overloaded, 5xx, connection, timeout), waiting ``retry-after`` when the server sent one,
else an exponential backoff; the wait ends early when the request is cancelled. ``pump`` runs a
blocking producer (an SDK call and the iteration of its stream) in a daemon thread and hands its
items to the caller's thread, so a cancel is noticed within ``POLL_SECONDS`` even while the socket
read blocks, and ``on_text`` callbacks still run on the caller's thread. ``parse_arguments`` turns a
model's tool-input JSON into a dict; malformed JSON becomes ``{"_raw": text}`` rather than an error, so
the tool layer can tell the model what was wrong and the run goes on.
"""

from __future__ import annotations

import email.utils
import json
import queue
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from ..protocol import BackendError, ErrorKind, ModelReply

T = TypeVar("T")

POLL_SECONDS = 0.05  # how often a blocked caller looks at the cancel event: well under a human's reaction time
MAX_BACKOFF_SECONDS = 30.0  # cap of the exponential backoff: beyond this the user is better told than kept waiting
MAX_RETRY_AFTER_SECONDS = 60.0  # longer retry-after values are clamped (the SDKs honour up to 60 s as well)
RETRYABLE: frozenset[ErrorKind] = frozenset({"rate_limit", "overloaded", "server", "connection", "timeout"})

Sleeper = Callable[[float, "threading.Event | None"], bool]  # (seconds, cancel) -> True if cancelled


class TransientError(BackendError):
    """A failure worth another attempt; ``retry_after`` is the server's hint in seconds, if any."""

    def __init__(self, kind: ErrorKind, message: str, status: int | None = None,
                 retry_after: float | None = None):
        super().__init__(kind, message, status=status, retryable=True)
        self.retry_after = retry_after
        self.retries = 0  # attempts retried before this error was given up on


def cancelled() -> BackendError:
    return BackendError("cancelled", "the request was cancelled")


def check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise cancelled()


def wait(seconds: float, cancel: threading.Event | None) -> bool:
    """Sleep ``seconds`` unless cancelled first; True if cancelled."""
    if seconds <= 0:
        return cancel is not None and cancel.is_set()
    if cancel is None:
        time.sleep(seconds)
        return False
    return cancel.wait(seconds)


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date), clamped; None if absent."""
    if not headers:
        return None
    value: float | None = None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            value = float(ms) / 1000.0
    except ValueError:
        value = None
    raw = headers.get("retry-after")
    if value is None and raw is not None:
        try:
            value = float(raw)
        except ValueError:
            try:
                value = email.utils.parsedate_to_datetime(raw).timestamp() - time.time()
            except (ValueError, TypeError):  # neither seconds nor an HTTP date: no hint
                value = None
    if value is None:
        return None
    return min(max(value, 0.0), MAX_RETRY_AFTER_SECONDS)


def delay_for(attempt: int, backoff: float, retry_after: float | None) -> float:
    """Wait before retry number ``attempt`` (0-based). ``backoff`` 0 disables waiting altogether (tests)."""
    if backoff <= 0:
        return 0.0
    if retry_after is not None:
        return retry_after
    base = min(backoff * (2 ** attempt), MAX_BACKOFF_SECONDS)
    return base * random.uniform(0.75, 1.0)  # jitter so parallel runs do not retry in lockstep


def with_retries(attempt: Callable[[], ModelReply], *, max_retries: int, backoff: float,
                 cancel: threading.Event | None, sleep: Sleeper = wait) -> ModelReply:
    """Run ``attempt`` until it returns, retrying ``TransientError`` up to ``max_retries`` times.

    The reply's ``retries`` is the number of retried failures. When retries run out the last
    ``TransientError`` is raised with ``retries`` set and the count in its message.
    """
    retries = 0
    while True:
        check_cancel(cancel)
        try:
            reply = attempt()
        except TransientError as err:
            if retries >= max(0, max_retries):
                err.retries = retries
                if retries:
                    err.args = (f"{err.args[0] if err.args else err.kind} (gave up after {retries} retries)",)
                raise
            if sleep(delay_for(retries, backoff, err.retry_after), cancel):
                raise cancelled() from err
            retries += 1
            continue
        reply.retries = retries
        return reply


_DONE = object()


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


def pump(produce: Callable[[], Iterable[Any]], cancel: threading.Event | None) -> Iterator[Any]:
    """Yield the items of ``produce()`` (an SDK response or stream); its exceptions re-raise here.

    Without a cancel event it runs inline. With one, the call and the iteration run in a daemon
    thread; when the event is set (checked while waiting and after every item) the stream is closed
    (if it has ``close()``) and ``BackendError("cancelled")`` is raised without waiting for the thread.
    """
    if cancel is None:
        source = produce()
        try:
            yield from source
        finally:
            _close(source)
        return
    check_cancel(cancel)
    q: queue.SimpleQueue[Any] = queue.SimpleQueue()
    gone = threading.Event()
    opened: list[Iterable[Any]] = []

    def run() -> None:
        try:
            source = produce()
            opened.append(source)
            for item in source:
                if gone.is_set():  # the caller left (cancelled) while this thread was blocked
                    _close(source)
                    return
                q.put(item)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            q.put(_Failed(e))
            return
        q.put(_DONE)

    threading.Thread(target=run, name="llm-backend-call", daemon=True).start()
    finished = False
    try:
        while True:
            try:
                item = q.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if cancel.is_set():
                    raise cancelled() from None
                continue
            if item is _DONE:
                finished = True
                return
            if isinstance(item, _Failed):
                finished = True
                if cancel.is_set():
                    raise cancelled() from item.error
                raise item.error
            yield item
            if cancel.is_set():
                raise cancelled()
    finally:
        gone.set()
        if not finished:  # cancelled, or the consumer gave up on a bad stream: release the connection
            for source in opened:
                _close(source)


def _close(source: Iterable[Any]) -> None:
    close = getattr(source, "close", None)
    if callable(close):
        try:
            close()
        except Exception:  # noqa: BLE001, S110 - closing a half-read stream from another thread may complain
            pass


def parse_arguments(raw: str) -> dict[str, Any]:
    """Tool input JSON -> dict; empty -> {}; malformed or not an object -> ``{"_raw": raw}``."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}
