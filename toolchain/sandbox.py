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
    env = dict(os.environ, NKI_AGENT_RESULT_FD=str(w_fd), PYTHONDONTWRITEBYTECODE="1")
    for var in THREAD_VARS:  # many small ops: thread pools only add contention (and nondeterminism)
        env.setdefault(var, "1")
    try:
        proc = subprocess.Popen([sys.executable, "-m", "nki_agent.toolchain.worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, pass_fds=(w_fd,),
                                start_new_session=True)
    finally:
        os.close(w_fd)
    deadline = time.monotonic() + timeout
    payload: bytes | None = json.dumps(req).encode()
    while True:
        step = deadline - time.monotonic()
        if cancel is not None:
            step = min(step, CANCEL_POLL)
        try:
            _, err = proc.communicate(payload, timeout=max(step, 0.0))
            break
        except subprocess.TimeoutExpired:
            payload = None  # already handed to the worker; communicate() keeps writing it
            if cancel is not None and cancel.is_set():
                _kill(proc)
                os.close(r_fd)
                return _failure("sim_cancelled", "cancelled while running", request)
            if time.monotonic() >= deadline:
                _kill(proc)
                os.close(r_fd)
                return _failure("sim_timeout", f"the kernel did not finish within {timeout:g} s (infinite loop?)",
                                request)
    with os.fdopen(r_fd, "rb") as f:
        raw = f.read()
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


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _failure(code: str, message: str, request: dict[str, Any], stderr: str = "") -> dict[str, Any]:
    path = request.get("kernel") or "?"
    problem = Problem(code, message + (f"\n{stderr.strip()[-800:]}" if stderr.strip() and code == "sim_worker_crash" else ""),
                      location=SourceLocation(path, 1))
    return {"ok": True, "problem": problem.as_dict(), "stderr": stderr}
