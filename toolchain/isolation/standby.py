"""Warm workers: a long-lived process (the editor's server, the agent, the runner) keeps one started worker ready
per kind of job that loads no user code — the verdict's executor — so a verification does not start one.

``prepare(job, timeout)`` starts a worker for ``job`` with ``"warm": true`` in its request (it imports the
simulator and the cost model and runs a built-in kernel of its own through them, ``judging/warmup.py``) and
keeps it; ``claim(job, timeout, cancel)`` hands it out once, or returns None (then the caller starts one). A
warm worker is an ordinary ``sandbox.Worker``: jailed, in its own cgroup, and used for exactly one job (never
returned, never reused); its wall-clock deadline starts when it is claimed, and one unclaimed for ``IDLE``
seconds is stopped. It is matched on everything its start fixed — the request, what its jail binds and hides,
the timeout (its rlimits) and the memory limit — so a claimed worker is the worker a cold start would have made.

Workers are started from one daemon thread (the kernel kills a worker when the *thread* that started it ends,
``worker._die_with_parent``; this thread lives as long as the process); ``prepare`` waits until the process is
spawned (milliseconds), not until it is warm. ``NKI_AGENT_WARM_WORKERS=0`` turns warm workers off. At exit
every warm worker is stopped and its cgroup removed.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import threading
import time
from dataclasses import replace
from typing import Any

from nki_agent.toolchain.isolation import sandbox

ENV = "NKI_AGENT_WARM_WORKERS"
IDLE = 300.0  # seconds a warm worker waits to be claimed before it is stopped
REAP_EVERY = 10.0  # seconds between looks for warm workers past their idle time
SPAWN_WAIT = 30.0  # seconds ``prepare`` waits for the spawning thread at most

_Key = tuple[Any, ...]
_lock = threading.Lock()
_ready: dict[_Key, sandbox.Worker] = {}
_requests: queue.Queue[tuple[sandbox.Job, float, int, _Key, threading.Event]] = queue.Queue()
_thread: threading.Thread | None = None


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _key(job: sandbox.Job, timeout: float, memory_bytes: int) -> _Key:
    return (os.getpid(), json.dumps(job.request, sort_keys=True, default=str), job.readable, job.hidden,
            job.devices, tuple(job.env), job.imports_only, job.max_result_bytes, float(timeout), int(memory_bytes))


def _usable(w: sandbox.Worker) -> bool:
    return (not w.killed and w.proc.poll() is None and time.monotonic() < w.deadline
            and not w.result_pipe.frames and w.result_pipe.queue.empty())


def claim(job: sandbox.Job, timeout: float = sandbox.DEFAULT_TIMEOUT, memory_bytes: int = sandbox.DEFAULT_MEMORY,
          cancel: threading.Event | None = None) -> sandbox.Worker | None:
    """The warm worker started for a job like ``job``, now ``job``'s (its deadline starts now), or None."""
    if not enabled():
        return None
    with _lock:
        w = _ready.pop(_key(job, timeout, memory_bytes), None)
    if w is None:
        return None
    if not _usable(w):
        _stop(w)
        return None
    w.claim(timeout, cancel)
    return w


def prepare(job: sandbox.Job, timeout: float = sandbox.DEFAULT_TIMEOUT,
            memory_bytes: int = sandbox.DEFAULT_MEMORY) -> None:
    """Start a warm worker for the next job like ``job`` unless one is ready; returns once it is spawned."""
    if not enabled():
        return
    key = _key(job, timeout, memory_bytes)
    with _lock:
        w = _ready.get(key)
        if w is not None and _usable(w):
            return
        _spawner()
    done = threading.Event()
    _requests.put((job, timeout, memory_bytes, key, done))
    done.wait(SPAWN_WAIT)  # a spawn takes milliseconds; a stuck one costs the next job its warm start, no more


def stop_all() -> None:
    """Stop every warm worker (at exit, and for callers that want none left)."""
    with _lock:
        workers = list(_ready.values())
        _ready.clear()
    for w in workers:
        _stop(w)


def _stop(w: sandbox.Worker) -> None:
    w.kill()
    w.result()  # reaps it and removes its cgroup


def _spawner() -> None:
    global _thread
    if _thread is None or not _thread.is_alive():
        _thread = threading.Thread(target=_serve, name="nki-warm-workers", daemon=True)
        _thread.start()
        atexit.register(stop_all)


def _serve() -> None:
    while True:
        try:
            _serve_one()
        except Exception:  # noqa: BLE001 - the thread must outlive any one spawn or reap (its children die with it)
            pass


def _serve_one() -> None:
    try:
        job, timeout, memory_bytes, key, done = _requests.get(timeout=REAP_EVERY)
    except queue.Empty:
        _reap()
        return
    try:
        warm = replace(job, request=dict(job.request, warm=True))
        w: sandbox.Worker | None = sandbox.Worker(warm, timeout, memory_bytes, idle=IDLE)
    except Exception:  # noqa: BLE001 - no warm worker: the next job starts its own, as without this module
        w = None
    finally:
        done.set()
    if w is not None:
        with _lock:
            old, _ready[key] = _ready.get(key), w
        if old is not None:
            _stop(old)
    _reap()


def _reap() -> None:
    with _lock:
        stale = [k for k, w in _ready.items() if not _usable(w)]
        workers = [_ready.pop(k) for k in stale]
    for w in workers:
        _stop(w)
