"""Worker process: ``python -m nki_agent.toolchain.isolation.worker`` reads request frames on stdin (``wire.py``).

Runs untrusted kernel and task code — normally inside the OS jail ``sandbox.py`` puts it in — under
rlimits it sets on itself before reading any user code (address space, CPU seconds, file size,
descriptors, no core dumps, no POSIX message queues, and — jailed — ``RLIMIT_NPROC`` at the request's
``limits.tasks``: in the jail's own user namespace the kernel counts only the jail's tasks, threads
included, except when the tool runs as root, which the kernel exempts). Where the job has no cgroup (``limits.cgroup``
empty: ``jail_cgroup``), a thread cap on ``_thread`` also refuses threads past that number (a tripwire:
the cgroup's ``pids.max`` is the hard bound where the host allows one), with the simulator's imports, and writes exactly one reply frame to the
descriptor it was given, last (the roles of a verification stream frames before it). User prints go to stderr so they can never corrupt the reply (and the
parent trusts nothing in it beyond array shapes and dtypes anyway). Before reading the request it
asks the kernel to kill it when its parent dies (Linux). Ops: ``reference``, ``trace`` and ``execute``
(the worker roles of a verification: the task's reference, the kernel traced on placeholders, the traced
program executed on each seed with no user code loaded; ``roles.py``, ``trace_roles.py``), ``kernel`` (the
kernel run directly on each seed, ``roles.py``; ``kernel`` with ``role: "device"`` is the kernel role on a
Neuron device, ``device_role.py``), ``baseline`` (the task's reference timed, ``baseline_role.py``),
``simulate`` (``estimate`` / ``timeline`` / ``sensitivities`` / ``arithmetic``: the cost model's estimate of
the launch, with its engine timeline or its sensitivities to the model's constants, on a trace-only run if
asked), ``taskless`` (a kernel file with no task: its ``__main__`` driver, a pytest test or its shape lines,
``taskless/``) and ``describe``. A request's
``search_path`` (folders the kernel and task may import from after their own) is passed to
``tasks.load_module``; the worker never writes bytecode.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
from typing import Any

from nki_agent.toolchain.protocol import wire
from nki_agent.toolchain.facts.errors import NkiError, Problem

PR_SET_PDEATHSIG = 1  # prctl option from <linux/prctl.h>: signal sent to us when our parent thread exits
MAX_REQUEST_BYTES = 4 << 30  # input arrays the parent sends (it drew them itself)
FILE_BYTES = 64 << 20  # largest file the worker may write (it writes none; a disk fill stops here)
OPEN_FILES = 256


def _die_with_parent() -> None:
    """SIGKILL this worker when the parent dies; exit now if it already has (the fork/prctl race).

    The signal follows the parent *thread* that started us; ``sandbox.run`` blocks that thread until
    we end, so it outlives us unless the whole parent dies. In the jail bwrap does the same."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # no libc symbol: keep the rlimits as the only backstop
            pass
    expected = os.environ.get("NKI_AGENT_PARENT_PID", "")
    if expected.isdigit() and expected != "0" and os.getppid() != int(expected):
        os._exit(3)  # re-parented before prctl took effect: the tool that wanted this result is gone


def _limit(memory_bytes: int, cpu_seconds: int, tasks: int = 0) -> None:
    """Hard limits: kernel code cannot raise them again."""
    limits = [(resource.RLIMIT_FSIZE, FILE_BYTES), (resource.RLIMIT_NOFILE, OPEN_FILES), (resource.RLIMIT_CORE, 0)]
    if hasattr(resource, "RLIMIT_MSGQUEUE"):
        limits.append((resource.RLIMIT_MSGQUEUE, 0))
    if tasks > 0 and hasattr(resource, "RLIMIT_NPROC"):
        limits.append((resource.RLIMIT_NPROC, tasks))
    if memory_bytes > 0:
        limits.append((resource.RLIMIT_AS, memory_bytes))
    if cpu_seconds > 0:
        limits.append((resource.RLIMIT_CPU, cpu_seconds))
    for which, value in limits:
        try:
            _, hard = resource.getrlimit(which)
            cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (cap, cap))
        except (ValueError, OSError):
            pass
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an over-large write fails with EFBIG instead of killing us


def _cap_threads(tasks: int) -> None:
    """Refuse new threads once ``tasks`` run (the fallback where no cgroup bounds the job's tasks)."""
    import _thread
    import threading

    start = _thread.start_new_thread

    def capped(function: Any, args: Any, kwargs: Any = None) -> int:
        if threading.active_count() >= tasks or _thread._count() >= tasks:  # type: ignore[attr-defined]
            raise RuntimeError(f"can't start new thread: the job's thread cap ({tasks}) is reached")
        return start(function, args, kwargs or {})

    _thread.start_new_thread = capped  # type: ignore[assignment]
    threading._start_new_thread = capped  # type: ignore[attr-defined]


def _limits(req: dict[str, Any]) -> None:
    """The request's rlimits, and the thread cap when the job has no cgroup."""
    extra = req.get("limits")
    extra = extra if isinstance(extra, dict) else {}
    tasks = extra.get("tasks")
    tasks = tasks if isinstance(tasks, int) else 0
    # RLIMIT_NPROC only in the jail: outside a user namespace of its own it would count all the user's processes
    _limit(int(req.get("memory_bytes", 0)), int(req.get("cpu_seconds", 0)), tasks if extra.get("nproc") else 0)
    if tasks > 0 and not extra.get("cgroup"):
        _cap_threads(tasks)


def _flag(req: dict[str, Any], name: str, default: bool) -> bool:
    """A boolean field of the request (absent: ``default``); anything but a JSON boolean is a malformed request."""
    value = req.get(name, default)
    if not isinstance(value, bool):
        raise TypeError(f"request field {name!r} must be a boolean, got {type(value).__name__}")
    return value


def _calibration(req: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The request's ``cost_constants`` (the user's calibration, sent by the parent), validated."""
    if req.get("cost_constants") is None:
        return {}
    from nki_agent.toolchain.cost.calibration import parse_overrides

    return parse_overrides(req.get("cost_constants"))


def handle(req: dict[str, Any], out_fd: int) -> tuple[dict[str, Any], list[Any]]:
    from nki_agent.toolchain.tasks import search_path

    op = req.get("op")
    extra = search_path(req)
    sys.dont_write_bytecode = True  # the user's folders are read, never written
    if op == "reference":
        from nki_agent.toolchain.judging.roles import reference_role

        return reference_role(req, lambda header, arrays: wire.write(out_fd, header, arrays))
    if op == "kernel" and req.get("role") == "device":
        from nki_agent.toolchain.judging.device_role import device_role

        return device_role(req, lambda: wire.read(sys.stdin.buffer, MAX_REQUEST_BYTES),
                           lambda header, arrays: wire.write(out_fd, header, arrays))
    if op == "kernel":
        from nki_agent.toolchain.judging.roles import kernel_role

        return kernel_role(req, lambda: wire.read(sys.stdin.buffer, MAX_REQUEST_BYTES),
                           lambda header, arrays: wire.write(out_fd, header, arrays))
    if op == "trace":
        from nki_agent.toolchain.judging.trace_roles import trace_role

        return trace_role(req, lambda: wire.read(sys.stdin.buffer, MAX_REQUEST_BYTES),
                          lambda header, arrays: wire.write(out_fd, header, arrays))
    if op == "execute":
        from nki_agent.toolchain.judging.trace_roles import executor_role

        return executor_role(req, lambda: wire.read(sys.stdin.buffer, MAX_REQUEST_BYTES),
                             lambda header, arrays: wire.write(out_fd, header, arrays))
    if op == "baseline":
        from nki_agent.toolchain.judging.baseline_role import baseline_role

        return baseline_role(req)
    if op == "simulate":
        from nki_agent.toolchain.judging.simulate import simulate_files

        return {"ok": True, "result": simulate_files(req["kernel"], req["task"], target=req.get("target"),
                                                     kernel_name=req.get("kernel_name"), seed=int(req.get("seed", 0)),
                                                     time_limit=req.get("time_limit"), search_path=extra,
                                                     estimate=_flag(req, "estimate", False),
                                                     timeline=_flag(req, "timeline", False),
                                                     arithmetic=_flag(req, "arithmetic", True),
                                                     sensitivities=_flag(req, "sensitivities", False),
                                                     calibration=_calibration(req))}, []
    if op == "taskless":
        from nki_agent.toolchain.taskless import run_job

        return {"ok": True, "result": run_job(req)}, []
    if op == "describe":
        from nki_agent.toolchain.tasks import describe_task

        return {"ok": True, "result": describe_task(req["task"], extra)}, []
    return {"ok": False, "error": f"unknown op {op!r}"}, []


def main() -> int:
    _die_with_parent()  # before any user code is loaded
    out_fd = os.dup(int(os.environ.get("NKI_AGENT_RESULT_FD", "1")))
    os.dup2(2, 1)  # anything the kernel prints goes to stderr
    arrays: list[Any] = []
    try:
        req, _ = wire.read(sys.stdin.buffer, 0)
        _limits(req)
        sys.setrecursionlimit(min(sys.getrecursionlimit(), 3000))
        reply, arrays = handle(req, out_fd)
    except NkiError as e:
        reply = {"ok": True, "problem": Problem.from_error(e).as_dict()}
    except MemoryError:
        reply = {"ok": False, "code": "sim_memory_limit", "error": "the kernel exceeded the simulation memory limit"}
    except Exception as e:  # a bug of ours or a malformed request: report, never hang
        reply = {"ok": False, "code": "sim_worker_crash", "error": f"{type(e).__name__}: {e}"}
    try:
        wire.write(out_fd, reply, arrays)
    except (TypeError, ValueError) as e:  # an output the frame cannot carry
        wire.write(out_fd, {"ok": False, "code": "sim_worker_crash", "error": f"unsendable reply: {e}"})
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)  # the reply is out: tearing the interpreter down (numpy, the simulator) only delays the parent


if __name__ == "__main__":
    sys.exit(main())
