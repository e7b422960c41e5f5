"""Runs toolchain jobs on untrusted code in a separate, resource-limited worker process.

The parent never executes kernel or task code. It enforces a wall-clock limit (the worker's own
cooperative deadline fires first, the kill is the backstop for ``while True: pass``), an
address-space limit (unbounded allocation ends as ``sim_memory_limit``) and a CPU-time limit, and
turns every way the worker can die into one clear problem.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from .errors import Problem, SourceLocation

DEFAULT_TIMEOUT = 60.0  # seconds of wall time per job; the largest example verifies in well under 5 s
DEFAULT_MEMORY = 6 << 30  # address space of the worker: numpy + torch need ~2 GiB of it before any kernel runs
STDERR_TAIL = 4000  # characters of worker stderr kept for diagnostics
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
CANCEL_POLL = 0.05  # seconds between looks at the cancel event while the worker runs: prompt enough for a click
READER_GRACE = 5.0  # seconds to wait for the result reader after the worker ended: a grandchild may hold the pipe


def run(request: dict[str, Any], timeout: float = DEFAULT_TIMEOUT, memory_bytes: int = DEFAULT_MEMORY,
        cancel: threading.Event | None = None) -> dict[str, Any]:
    """Send one request to a fresh worker; returns its reply or a synthesized failure reply.

    Setting ``cancel`` kills the worker (its whole process group) and returns ``sim_cancelled``."""
    if cancel is not None and cancel.is_set():
        return _failure("sim_cancelled", "cancelled before it started", request)
    req = dict(request)
    req.setdefault("time_limit", max(timeout - 2.0, timeout * 0.9))
    req["memory_bytes"] = memory_bytes
    req["cpu_seconds"] = int(timeout * 2) + 5
    r_fd, w_fd = os.pipe()
    env = dict(os.environ, NKI_AGENT_RESULT_FD=str(w_fd), NKI_AGENT_PARENT_PID=str(os.getpid()),
               PYTHONDONTWRITEBYTECODE="1")
    for var in THREAD_VARS:  # many small ops: thread pools only add contention (and nondeterminism)
        env.setdefault(var, "1")
    try:
        proc = subprocess.Popen([sys.executable, "-m", "nki_agent.toolchain.worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, pass_fds=(w_fd,),
                                start_new_session=True)
    except BaseException:
        os.close(r_fd)
        raise
    finally:
        os.close(w_fd)
    # The result is drained while the worker runs: a result larger than the pipe buffer (64 KiB) would
    # otherwise block the worker's final write forever and end as a false sim_timeout.
    chunks: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(r_fd, chunks), name="nki-sandbox-result", daemon=True)
    reader.start()
    try:
        err = _wait(proc, json.dumps(req).encode(), timeout, cancel)
    except BaseException:  # KeyboardInterrupt, a cancelled caller...: never leave the worker running
        _kill(proc)
        reader.join(READER_GRACE)
        raise
    if err is None:
        reader.join(READER_GRACE)
        if cancel is not None and cancel.is_set():
            return _failure("sim_cancelled", "cancelled while running", request)
        return _failure("sim_timeout", f"the kernel did not finish within {timeout:g} s (infinite loop?)", request)
    reader.join(READER_GRACE)
    raw = b"".join(chunks)
    stderr = err.decode("utf-8", "replace")[-STDERR_TAIL:]
    if raw:
        try:
            reply = json.loads(raw)
            reply["stderr"] = stderr
            return reply  # type: ignore[no-any-return]
        except json.JSONDecodeError:
            pass
    if proc.returncode in (-signal.SIGKILL, -signal.SIGXCPU) or "MemoryError" in stderr:
        code = "sim_memory_limit" if "MemoryError" in stderr or proc.returncode == -signal.SIGKILL else "sim_timeout"
        return _failure(code, f"the simulation worker was stopped ({'memory' if code == 'sim_memory_limit' else 'CPU time'} limit)", request, stderr)
    return _failure("sim_worker_crash", f"the simulation worker exited with status {proc.returncode}", request, stderr)


def _wait(proc: subprocess.Popen[bytes], payload: bytes, timeout: float,
          cancel: threading.Event | None) -> bytes | None:
    """The worker's stderr once it exits, or None after killing it (cancelled or out of time)."""
    deadline = time.monotonic() + timeout
    pending: bytes | None = payload
    while True:
        step = deadline - time.monotonic()
        if cancel is not None:
            step = min(step, CANCEL_POLL)
        try:
            _, err = proc.communicate(pending, timeout=max(step, 0.0))
            return err
        except subprocess.TimeoutExpired:
            pending = None  # already handed to the worker; communicate() keeps writing it
            if (cancel is not None and cancel.is_set()) or time.monotonic() >= deadline:
                _kill(proc)
                return None


def _drain(fd: int, chunks: list[bytes]) -> None:
    """Read the result pipe to its end (all writers closed: the worker exited or was killed)."""
    with os.fdopen(fd, "rb", buffering=0) as f:
        while True:
            chunk = f.read(1 << 16)
            if not chunk:
                return
            chunks.append(chunk)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stderr):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:  # a half-written stdin reports the broken pipe on close
                pass


def _failure(code: str, message: str, request: dict[str, Any], stderr: str = "") -> dict[str, Any]:
    path = request.get("kernel") or "?"
    problem = Problem(code, message + (f"\n{stderr.strip()[-800:]}" if stderr.strip() and code == "sim_worker_crash" else ""),
                      location=SourceLocation(path, 1))
    return {"ok": True, "problem": problem.as_dict(), "stderr": stderr}
