"""Simulation worker process: ``python -m nki_agent.toolchain.worker`` reads one JSON request on stdin.

Runs untrusted kernel and task code under resource limits (address space, CPU seconds) with the
simulator's imports, and writes exactly one JSON result to the file descriptor it was given. User
prints go to stderr so they can never corrupt the result. Before reading the request it asks the
kernel to kill it when its parent dies (Linux), so a dead tool never leaves a worker burning CPU.
A request's ``search_path`` (folders the kernel and task may import from after their own, e.g. the
user's kernel folder for the fix agent's temp copies) is passed to ``tasks.load_module``; the worker
then never writes bytecode, so those folders are only read.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from typing import Any

from .errors import NkiError, Problem

PR_SET_PDEATHSIG = 1  # prctl option from <linux/prctl.h>: signal sent to us when our parent thread exits


def _die_with_parent() -> None:
    """SIGKILL this worker when the parent dies; exit now if it already has (the fork/prctl race).

    The signal follows the parent *thread* that started us; ``sandbox.run`` blocks that thread until
    we end, so it outlives us unless the whole parent dies."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # no libc symbol: keep the rlimits as the only backstop
            pass
    expected = os.environ.get("NKI_AGENT_PARENT_PID", "")
    if expected.isdigit() and os.getppid() != int(expected):
        os._exit(3)  # re-parented before prctl took effect: the tool that wanted this result is gone


def _limit(memory_bytes: int, cpu_seconds: int) -> None:
    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    if cpu_seconds > 0:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))


def handle(req: dict[str, Any]) -> dict[str, Any]:
    from .tasks import search_path

    op = req.get("op")
    extra = search_path(req)
    if extra:
        sys.dont_write_bytecode = True  # imports from the user's folders must never write __pycache__ there
    if op == "verify":
        from .verify import verify_files

        res = verify_files(req["kernel"], req["task"], seeds=int(req.get("seeds", 3)), target=req.get("target"),
                           kernel_name=req.get("kernel_name"), time_limit=req.get("time_limit"), search_path=extra)
        return {"ok": True, "result": res.as_dict()}
    if op == "verify_confined":
        from .confined import worker_verify

        return worker_verify(req)
    if op == "simulate":
        from .simulate import simulate_files

        return {"ok": True, "result": simulate_files(req["kernel"], req["task"], target=req.get("target"),
                                                     kernel_name=req.get("kernel_name"), seed=int(req.get("seed", 0)),
                                                     time_limit=req.get("time_limit"), search_path=extra)}
    if op == "describe":
        from .tasks import describe_task

        return {"ok": True, "result": describe_task(req["task"], extra)}
    return {"ok": False, "error": f"unknown op {op!r}"}


def main() -> int:
    _die_with_parent()  # before any user code is loaded
    out_fd = int(os.environ.get("NKI_AGENT_RESULT_FD", "1"))
    out = os.fdopen(os.dup(out_fd), "w")
    os.dup2(2, 1)  # anything the kernel prints goes to stderr
    try:
        req = json.loads(sys.stdin.read())
        _limit(int(req.get("memory_bytes", 0)), int(req.get("cpu_seconds", 0)))
        sys.setrecursionlimit(min(sys.getrecursionlimit(), 3000))
        reply = handle(req)
    except NkiError as e:
        reply = {"ok": True, "problem": Problem.from_error(e).as_dict()}
    except MemoryError:
        reply = {"ok": False, "code": "sim_memory_limit", "error": "the kernel exceeded the simulation memory limit"}
    except Exception as e:  # a bug of ours or a malformed request: report, never hang
        reply = {"ok": False, "code": "sim_worker_crash", "error": f"{type(e).__name__}: {e}"}
    out.write(json.dumps(reply, default=str))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
