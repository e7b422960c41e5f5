"""The job manager: accepted jobs, a fair queue, one worker thread per slot, cancel, progress, cache.

``submit`` validates nothing about the code (the backend's jail is the boundary) but its layout: a
kernel bundle that shadows a task import or an installed module is refused (``layout.check``,
``ShadowError``). It caps the job's ``timeout_s`` (and a profile's ``time_budget_s``) at ``max_timeout_s``, stores the job (durable before
its id is returned), answers at once from the cache when the same kernel + task + settings ran before
on this backend and SDK, else queues it — ``QueueFull`` when the queue, or the token's share of it,
is full.

Scheduling is fair across tokens (``Fair``): each token has its own FIFO; a free slot takes the next
job of the waiting token with the fewest running jobs, ties broken round robin (the token after the
one served last), and never of a token already running ``running_per_token`` jobs. So one token's
queue of slow jobs delays another token's job by at most one slot-turn: the next free slot is its
own, and a slot-turn lasts at most ``max_timeout_s``.

Each worker thread owns one slot (the neuron backend: one NeuronCore) and runs one job at a time
through the ``Executor`` (the backend itself, or a Ray cluster: ``cluster.py``). A job's files live in
its own private folder (the kernel's and the task's bundles in two subfolders: ``layout.py``), removed
when it ends. Any failure of a job — a crash of its jailed worker, a bug in a backend — ends that job
(``failed`` with a reason), never the thread or the service.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from nki_agent.toolchain.protocol.jobs import JobRequest, JobResult, JobStatus, ProgressEvent
from .backends import Backend, PreparedJob, Progress, Slot
from .fair import Fair
from .layout import BundledJobRequest, check, prepare
from .store import Store

__all__ = ["Executor", "JobManager", "QueueFull", "Refused", "cache_key", "prepare"]

MAX_EVENTS = 200  # progress events kept per job
MAX_TIMEOUT_S = 300.0  # the default cap on a job's timeout_s, so one slot-turn is at most 5 minutes


class QueueFull(Exception):
    """The queue holds ``queue_size`` jobs already (HTTP 503)."""


class Refused(Exception):
    """The runner will not run untrusted jobs (no OS sandbox here and no --unsafe-no-sandbox)."""


class Executor(Protocol):
    def run(self, job: PreparedJob, slot: Slot, cancel: threading.Event, progress: Progress) -> JobResult: ...


@dataclass
class _Live:
    """In-memory state of a job that has not ended yet (or just ended): cancel flag and events."""

    owner: str
    cancel: threading.Event = field(default_factory=threading.Event)
    events: list[ProgressEvent] = field(default_factory=list)
    done: bool = False
    listeners: list[Callable[[], None]] = field(default_factory=list)


def cache_key(request: JobRequest, backend: str, sdk: str | None) -> str:
    """Hash of what decides a result: files, op and its settings, backend, SDK version, target."""
    fields = request.model_dump(mode="json", exclude={"nonce", "timeout_s"})
    blob = json.dumps({"request": fields, "backend": backend, "sdk": sdk or ""}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


class JobManager:
    def __init__(self, backend: Backend, store: Store, jobs_dir: str, workers: int = 1, queue_size: int = 256,
                 executor: Executor | None = None, use_cache: bool = True,
                 accept: Callable[[], str | None] = lambda: None, per_owner: int = 0, running_per_token: int = 0,
                 max_timeout_s: float = MAX_TIMEOUT_S) -> None:
        """``accept()`` returns why jobs are refused now (e.g. no sandbox), or None. ``per_owner`` caps the
        unfinished jobs of one token (0: a quarter of the queue, at least 8), so one client flooding
        the queue cannot lock the others out; ``running_per_token`` caps its running jobs (0: the
        slots); ``max_timeout_s`` caps every job's ``timeout_s`` (the longest slot-turn)."""
        self.backend = backend
        self.store = store
        self.jobs_dir = jobs_dir
        self.executor: Executor = executor or backend
        self.use_cache = use_cache
        self.accept = accept
        # a cluster chooses the NeuronCore on its node: its executor says how many slots it has
        slots = getattr(self.executor, "slots", None)
        self.slots = slots(workers) if callable(slots) else backend.slots(workers)
        self.queue_size = queue_size
        self.per_owner = per_owner or max(8, queue_size // 4)
        self.max_timeout_s = max_timeout_s
        self._fair = Fair(running_per_token)
        self._live: dict[str, _Live] = {}
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._closing = threading.Event()
        info = backend.info()
        self._sdk = info.sdk_version
        os.makedirs(jobs_dir, mode=0o700, exist_ok=True)

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        # no job runs yet: folders left by a runner that was killed hold clients' code; remove them
        for name in os.listdir(self.jobs_dir):
            shutil.rmtree(os.path.join(self.jobs_dir, name), ignore_errors=True)
        for job_id, owner in self.store.recover():
            with self._cond:
                self._live[job_id] = _Live(owner)
                self._fair.push(owner, job_id)
        for slot in self.slots:
            t = threading.Thread(target=self._work, args=(slot,), name=f"runner-slot-{slot.index}", daemon=True)
            t.start()
            self._threads.append(t)

    def close(self, timeout: float = 10.0) -> None:
        """Stop running jobs (they end failed), stop the threads; queued jobs stay queued in the store
        and run after the next start."""
        self._closing.set()
        with self._cond:
            for live in self._live.values():
                if not live.done:
                    live.cancel.set()
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout)

    # ------------------------------------------------------------------ API

    def submit(self, request: JobRequest, owner: str) -> JobStatus:
        request = BundledJobRequest.of(request)
        check(request)  # distinct names per bundle; no shadowing kernel module (ValueError / ShadowError)
        capped = max(request.timeout_s, request.time_budget_s) > self.max_timeout_s
        if capped:  # a profile's timing budget too: both bound how long the job holds its slot
            request = request.model_copy(update={"timeout_s": min(request.timeout_s, self.max_timeout_s),
                                                 "time_budget_s": min(request.time_budget_s, self.max_timeout_s)})
        reason = self.accept()
        if reason:
            raise Refused(reason)
        job_id = uuid.uuid4().hex
        now = time.time()
        key = cache_key(request, self.backend.name, self._sdk) if self.use_cache else ""
        hit = self.store.cached(key) if key else None
        if hit is not None:
            self.store.add(job_id, owner, request, "queued", now)
            hit.cached = True
            self.store.finish(job_id, "done", hit, None, cached=True)
            return self._status(job_id)
        with self._cond:
            if len(self._fair) >= self.queue_size:
                raise QueueFull(f"the queue is full ({self.queue_size} jobs waiting); retry later")
            mine = sum(1 for v in self._live.values() if v.owner == owner and not v.done)
            if mine >= self.per_owner:
                raise QueueFull(f"this token has {mine} unfinished jobs (the most one token may have); "
                                "retry when some have ended")
            self.store.add(job_id, owner, request, "queued", now)
            self._live[job_id] = _Live(owner)
            self._event(job_id, "queued", "accepted" + (f"; timeout_s / time_budget_s capped at this runner's "
                                                        f"{self.max_timeout_s:g} s" if capped else ""))
            self._fair.push(owner, job_id)  # after its first event: a slot may take it at once
            self._cond.notify_all()
        return self._status(job_id)

    def get(self, job_id: str, owner: str) -> JobStatus | None:
        """The job's status, or None when it does not exist or belongs to another token."""
        found = self.store.status(job_id)
        if found is None or found[0] != owner:
            return None
        status = found[1]
        with self._cond:
            live = self._live.get(job_id)
            if live is not None:
                status.events = list(live.events)
        return status

    def cancel(self, job_id: str, owner: str) -> JobStatus | None:
        status = self.get(job_id, owner)
        if status is None:
            return None
        with self._cond:
            live = self._live.get(job_id)
            if live is not None and not live.done:
                live.cancel.set()
                if self._fair.remove(live.owner, job_id):  # never started: ends now
                    self._end(job_id, "cancelled", None, "cancelled by the client")
        return self.get(job_id, owner)

    def wait(self, job_id: str, owner: str, timeout: float | None = None) -> JobStatus | None:
        """Block until the job ends (or ``timeout``); its status then."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                live = self._live.get(job_id)
                if live is None or live.done:
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cond.wait(left)
        return self.get(job_id, owner)

    def events_after(self, job_id: str, seq: int) -> tuple[list[ProgressEvent], bool]:
        """Progress events with ``seq`` greater than ``seq`` so far, and whether the job has ended (no
        waiting: a caller that wants to wait for the next one uses ``listen``)."""
        with self._cond:
            live = self._live.get(job_id)
            if live is None:
                return [], True
            return [e for e in live.events if e.seq > seq], live.done

    def find(self, owner: str, nonce: str) -> list[JobStatus]:
        """The owner's jobs submitted with ``nonce`` (newest first): how a client whose connection
        dropped before it learnt the job's id finds it again."""
        return [st for st in (self.get(i, owner) for i in self.store.by_nonce(owner, nonce)) if st is not None]

    def load(self) -> dict[str, int]:
        with self._cond:
            return {"queued": len(self._fair), "running": sum(self._fair.running.values()), "slots": len(self.slots)}

    # ------------------------------------------------------------------ internals

    def _status(self, job_id: str) -> JobStatus:
        found = self.store.status(job_id)
        assert found is not None
        return found[1]

    def listen(self, job_id: str, wake: Callable[[], None]) -> bool:
        """Call ``wake()`` (from a worker thread) on the job's next event; False when it has ended."""
        with self._cond:
            live = self._live.get(job_id)
            if live is None or live.done:
                return False
            live.listeners.append(wake)
            return True

    def unlisten(self, job_id: str, wake: Callable[[], None]) -> None:
        with self._cond:
            live = self._live.get(job_id)
            if live is not None and wake in live.listeners:
                live.listeners.remove(wake)

    def _wake(self, live: _Live) -> None:
        for wake in list(live.listeners):
            with contextlib.suppress(Exception):  # a closed event loop must not break the job
                wake()

    def _event(self, job_id: str, state: str, message: str) -> None:
        with self._cond:
            live = self._live.get(job_id)
            if live is None:
                return
            seq = live.events[-1].seq + 1 if live.events else 1
            live.events.append(ProgressEvent(id=job_id, state=state, message=message[:500], seq=seq))  # type: ignore[arg-type]
            del live.events[:-MAX_EVENTS]
            self._cond.notify_all()
            self._wake(live)

    def _end(self, job_id: str, state: str, result: JobResult | None, error: str | None) -> None:
        self.store.finish(job_id, state, result, error)
        with self._cond:
            live = self._live.get(job_id)
            if live is not None and not live.done:
                seq = live.events[-1].seq + 1 if live.events else 1
                live.events.append(ProgressEvent(id=job_id, state=state, message=error or state, seq=seq))  # type: ignore[arg-type]
                live.done = True
                self._wake(live)
            self._cond.notify_all()
        self._forget_later(job_id)

    def _forget_later(self, job_id: str) -> None:
        """Ended jobs leave memory (the store keeps them); a few recent ones stay for event streams."""
        with self._cond:
            ended = [k for k, v in self._live.items() if v.done]
            for k in ended[:-1000]:
                del self._live[k]

    def _take(self) -> tuple[str, str] | None:
        """The next (owner, job id) for a free slot (``Fair``), waiting for one; None when closing."""
        with self._cond:
            while not self._closing.is_set():
                picked = self._fair.pop()
                if picked is not None:
                    return picked
                self._cond.wait()
        return None  # queued jobs stay queued in the store: the next start runs them

    def _work(self, slot: Slot) -> None:
        while (picked := self._take()) is not None:
            owner, job_id = picked
            try:
                with self._cond:
                    live = self._live.get(job_id)
                if live is None or live.done or live.cancel.is_set():
                    if live is not None and not live.done:
                        self._end(job_id, "cancelled", None, "cancelled by the client")
                    continue
                try:
                    self._run_one(job_id, live, slot)
                except BaseException as e:  # noqa: BLE001 - a job's failure never ends the slot
                    self._end(job_id, "failed", None, f"internal error of the runner: {type(e).__name__}: {e}")
            finally:
                with self._cond:
                    self._fair.done(owner)
                    self._cond.notify_all()

    def _run_one(self, job_id: str, live: _Live, slot: Slot) -> None:
        request = self.store.request(job_id)
        if request is None:
            self._end(job_id, "failed", None, "the job's request is missing from the store")
            return
        self.store.started(job_id, slot.core_id)
        self._event(job_id, "running", f"running on slot {slot.index}"
                    + (f" (NeuronCore {slot.core_id})" if slot.core_id is not None else ""))
        folder = tempfile.mkdtemp(prefix=f"job-{job_id[:8]}-", dir=self.jobs_dir)
        try:
            prepared = prepare(job_id, request, folder)
            result = self.executor.run(prepared, slot, live.cancel, lambda m: self._event(job_id, "running", m))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if live.cancel.is_set():
            if self._closing.is_set():
                self._end(job_id, "failed", None, "the runner stopped during the job; submit it again")
            else:
                self._end(job_id, "cancelled", None, "cancelled by the client")
            return
        if self.use_cache and not _infrastructure_failure(result):
            self.store.remember(cache_key(request, self.backend.name, self._sdk), result)
        self._end(job_id, "done", result, None)


def _infrastructure_failure(result: JobResult) -> bool:
    """Results not worth caching: the worker crashed or timed out, or the host's SDK or device failed
    (the machine, not the code)."""
    return any(p.code in ("sim_worker_crash", "sim_timeout", "sim_cancelled", "runner_sdk_missing",
                          "runner_device_unavailable", "runner_device_error") for p in result.problems)
