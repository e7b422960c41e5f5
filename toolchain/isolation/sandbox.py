"""Runs toolchain jobs on untrusted code in a separate worker process inside the OS jail (``jail.py``).

This is the one seam every caller goes through (CLI, language server, agent, benchmarks, the runner):
``start(job)`` spawns ``python -m nki_agent.toolchain.isolation.worker`` jailed — or, where namespaces are
unavailable, as a plain resource-limited process, said once on stderr and labelled ``unsandboxed``
in every reply. The parent never executes kernel or task code. It sends the request (and later
frames of input arrays) on the worker's stdin, drains the result pipe, stdout and stderr while the
worker runs, each with a cap (a flood ends as a short "output truncated" note, never parent
memory), enforces the wall-clock limit and cancellation by killing the jail's whole pid namespace,
and turns every way the worker can die into one clear problem. The worker sets its own rlimits
(address space, CPU, processes, file size, descriptors) before it reads any user code.

Per job, where the host allows it (``jail_cgroup.host()``), the worker — jailed or not — runs in its
own control group: ``memory.max`` is the job's memory budget (address space + every tmpfs it can fill,
``jail.memory_budget``), ``pids.max`` is ``TASKS`` (threads count), one CPU of quota; the group is
removed when the job ends and ``Reply.limits`` says what it measured. Elsewhere the request's
``limits`` tell the worker to apply its fallback (``RLIMIT_NPROC`` and a thread cap, ``worker.py``).

What a jail sees of the user's files: for kernel code (``op`` ``kernel``, ``trace`` and ``simulate``, or
``Job.imports_only``) only the entry files and the modules they import (``jail_imports``) — never the
rest of their folders (``.git``, backups, ``.env``); for other ops (the task's reference role,
``describe``, task-less runs) the folders of the request's files and its search path.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nki_agent.toolchain.isolation import jail, jail_cgroup, jail_imports
from nki_agent.toolchain.protocol import wire
from nki_agent.toolchain.facts.errors import Problem, SourceLocation

if TYPE_CHECKING:  # arrays only pass through here: NumPy is the wire's, imported by the first frame
    import numpy as np

DEFAULT_TIMEOUT = 60.0  # seconds of wall time per job; the largest example verifies in well under 5 s
DEFAULT_MEMORY = 6 << 30  # address space of the worker: numpy + torch need ~2 GiB of it before any kernel runs
MAX_RESULT_BYTES = 1 << 30  # a reply larger than this is a flood, not a result
STREAM_HEAD = 4096  # bytes kept from the start of the worker's stdout/stderr ...
STREAM_TAIL = 16384  # ... and from its end; the rest is counted and dropped
STDERR_TAIL = 4000  # characters of worker stderr put into diagnostics
CANCEL_POLL = 0.05  # seconds between looks at the cancel event while the worker runs: prompt enough for a click
READER_GRACE = 5.0  # seconds to wait for the pipes after the worker ended (a grandchild may hold one, unjailed)
PIPE_BYTES = 1 << 20  # pipe buffer for arrays (Linux default 64 KiB: 16x the context switches per megabyte)
F_SETPIPE_SZ = 1031  # <linux/fcntl.h>
TASKS = 128  # processes + threads per job (bwrap's two, the worker's few): a thread bomb stops here
DEVICE_TASKS = 1024  # a Neuron device job: the SDK's compiler runs as child processes with their own threads
CPUS = 1.0  # CPU quota per job, where the cgroup has the cpu controller (the worker is single-threaded)
IMPORTS_ONLY_OPS = frozenset({"kernel", "trace", "simulate"})  # ops that run kernel code: only imported files are bound
_warned = threading.Event()


@dataclass
class Job:
    """One worker run: the request, what the jail lets it read, what it hides, and the device it may use.

    ``devices`` (only ``/dev/neuronN``) are bound into the jail; ``env`` adds ``NEURON_*`` / ``XLA_*``
    variables to the allow-listed environment (e.g. ``NEURON_RT_VISIBLE_CORES``). Anything else is
    refused here with ``jail.JailError``; a device that does not exist is refused by ``start``."""

    request: dict[str, Any]
    readable: tuple[str, ...] = ()  # folders bound read-only besides Python and the toolchain
    hidden: tuple[str, ...] = ()  # files the jail cannot open (the task, for the kernel role)
    max_result_bytes: int = MAX_RESULT_BYTES
    devices: tuple[str, ...] = ()  # Neuron device files bound into the jail (/dev/neuronN only)
    env: tuple[tuple[str, str], ...] | Mapping[str, str] = ()  # extra NEURON_* / XLA_* variables (pairs after init)
    # bind only the request's kernel (and task) files and what they import, not their folders; None: by op
    imports_only: bool | None = None

    def __post_init__(self) -> None:
        self.devices = jail.check_devices(tuple(self.devices))
        pairs = list(self.env.items()) if isinstance(self.env, Mapping) else list(self.env)
        self.env = jail.check_env(pairs)


@dataclass
class Reply:
    """What came back: the worker's (untrusted) reply body, its arrays, and how it ran."""

    body: dict[str, Any]
    arrays: list[np.ndarray | None] = field(default_factory=list)
    sandbox: str = jail.UNSANDBOXED
    stderr: str = ""
    failed: bool = False  # the body was synthesised here (timeout, crash, cancel, malformed reply)
    limits: dict[str, Any] = field(default_factory=dict)  # the job's cgroup and what it measured ({} without)


Frame = tuple[dict[str, Any], list["np.ndarray | None"]]


class _Capped:
    """Drains one pipe, keeping its head and tail; counts what it dropped. With a ``limit`` it is the
    result pipe instead: cut into frames as they arrive (``frames``, and each also on ``queue``, then
    ``None`` when the pipe closes), at most ``limit`` bytes in all."""

    def __init__(self, fd: int, name: str, limit: int | None = None, on_overflow: Any = None) -> None:
        self.head, self.tail, self.dropped, self.total = bytearray(), bytearray(), 0, 0
        self.limit, self.on_overflow, self.overflowed = limit, on_overflow, False
        self.splitter = wire.Splitter(limit) if limit is not None else None
        self.frames: list[Frame] = []
        self.queue: queue.Queue[Frame | None] = queue.Queue()
        self.error = ""
        self.thread = threading.Thread(target=self._drain, args=(fd,), name=f"nki-sandbox-{name}", daemon=True)
        self.thread.start()

    def _drain(self, fd: int) -> None:
        try:
            with os.fdopen(fd, "rb", buffering=0) as f:
                while True:
                    try:
                        chunk = f.read(1 << 16)
                    except OSError:
                        return
                    if not chunk:
                        return
                    self.total += len(chunk)
                    if self.splitter is not None:
                        self._frames(chunk)
                        continue
                    self._keep(chunk)
        finally:
            self.queue.put(None)

    def _frames(self, chunk: bytes) -> None:
        if self.overflowed or self.error or self.splitter is None:
            return  # drained and dropped: the worker must not block on a full pipe
        if self.limit is not None and self.total > self.limit:
            self.overflowed = True
            self.splitter = None
            if self.on_overflow is not None:
                self.on_overflow()
            return
        try:
            for frame in self.splitter.feed(chunk):
                self.frames.append(frame)
                self.queue.put(frame)
        except wire.WireError as e:
            self.error = str(e)
            self.splitter = None

    def _keep(self, chunk: bytes) -> None:
        room = STREAM_HEAD - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > STREAM_TAIL:
            self.dropped += len(self.tail) - STREAM_TAIL
            del self.tail[: len(self.tail) - STREAM_TAIL]

    def text(self) -> str:
        note = f"\n[... output truncated: {self.dropped} bytes dropped ...]\n" if self.dropped else ""
        return (bytes(self.head).decode("utf-8", "replace") + note + bytes(self.tail).decode("utf-8", "replace"))


class Worker:
    """A started job. ``send`` more frames on its stdin, then ``result()`` waits for its reply."""

    def __init__(self, job: Job, timeout: float = DEFAULT_TIMEOUT, memory_bytes: int = DEFAULT_MEMORY,
                 cancel: threading.Event | None = None, idle: float | None = None) -> None:
        self.job, self.timeout, self.cancel = job, timeout, cancel
        self.killed = False
        # a warm worker (``standby.py``) waits up to ``idle`` seconds; its job's ``timeout`` starts at ``claim``
        self.deadline = time.monotonic() + (timeout if idle is None else idle)
        req = dict(job.request)
        req.setdefault("time_limit", max(timeout - 2.0, timeout * 0.9))
        req.update(memory_bytes=memory_bytes, cpu_seconds=int(timeout * 2) + 5)
        tasks = DEVICE_TASKS if job.devices else TASKS
        state = jail.status()
        self.sandbox = state.label
        binds = jail.device_binds(job.devices)  # a missing device is refused before anything starts
        if not state.available and not _warned.is_set():
            _warned.set()
            print(f"nki-agent: running kernels UNSANDBOXED: {state.reason}", file=sys.stderr)
        r_fd, w_fd = os.pipe()
        _widen(w_fd)
        keep = [w_fd]
        seccomp = jail.open_seccomp(processes=bool(job.devices)) if state.available and state.seccomp else ()
        keep += list(seccomp)
        env = jail.environment({**dict(job.env), "NKI_AGENT_RESULT_FD": str(w_fd),
                                "NKI_AGENT_PARENT_PID": str(os.getpid()), "NKI_AGENT_SANDBOX": self.sandbox})
        argv = [sys.executable, "-I", "-B", "-m", "nki_agent.toolchain.isolation.worker"]
        spec = jail.JailSpec(readable=_readable(job), hidden=job.hidden, devices=binds)
        if state.available:
            env["NKI_AGENT_PARENT_PID"] = "0"  # in the jail's pid namespace the parent is outside (ppid 0)
            argv = jail.command(spec, argv, state.binary, seccomp[0] if seccomp else None)
        self.group = _group(jail.memory_budget(memory_bytes, spec), tasks)
        if self.group is not None:
            argv = self.group.wrap(argv)  # the shell execs bwrap (or the worker): the same process
        req["limits"] = {"cgroup": self.group.mode if self.group else "", "tasks": tasks, "nproc": state.available}
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env, pass_fds=tuple(keep),
                                         start_new_session=True)
        except BaseException:
            os.close(r_fd)
            if self.group is not None:
                self.group.close()
            raise
        finally:
            for fd in keep:
                os.close(fd)
        assert self.proc.stdin is not None and self.proc.stdout is not None and self.proc.stderr is not None
        _widen(self.proc.stdin.fileno())
        self.result_pipe = _Capped(r_fd, "result", job.max_result_bytes, self.kill)
        self.stdout = _Capped(os.dup(self.proc.stdout.fileno()), "stdout")
        self.stderr = _Capped(os.dup(self.proc.stderr.fileno()), "stderr")
        self.proc.stdout.close()
        self.proc.stderr.close()
        self._frames: queue.Queue[list[bytes | memoryview] | None] = queue.Queue()
        self._writer = threading.Thread(target=self._write, name="nki-sandbox-stdin", daemon=True)
        self._writer.start()
        self.send(req)

    def claim(self, timeout: float, cancel: threading.Event | None) -> None:
        """A warm worker becomes a job's: the wall-clock limit and the cancel event are the job's from now."""
        self.timeout, self.cancel = timeout, cancel
        self.deadline = time.monotonic() + timeout

    def send(self, header: dict[str, Any], arrays: Sequence[np.ndarray | None] = ()) -> None:
        self._frames.put(wire.encode(header, arrays))

    def close_input(self) -> None:
        self._frames.put(None)

    def _write(self) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            while True:
                pieces = self._frames.get()
                if pieces is None:
                    break
                for p in pieces:
                    stdin.write(p)
                stdin.flush()
        except (OSError, ValueError):  # the worker exited (or was killed) before reading everything
            pass
        finally:
            try:
                stdin.close()
            except (OSError, ValueError):
                pass

    def stream(self) -> Any:
        """Yield the worker's frames as they arrive, until its result pipe closes; the deadline and the
        cancel event still apply (the worker is killed, the stream ends)."""
        while True:
            try:
                item = self.result_pipe.queue.get(timeout=CANCEL_POLL)
            except queue.Empty:
                if (self.cancel is not None and self.cancel.is_set()) or time.monotonic() >= self.deadline:
                    self.kill()
                    return
                continue
            if item is None:
                return
            yield item

    def kill(self) -> None:
        """Kill the worker: bwrap's death takes the jail's pid namespace with it."""
        self.killed = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass

    def result(self) -> Reply:
        """Wait for the worker (deadline, cancel) and return its reply or a synthesised failure."""
        try:
            ended = self._wait()
        except BaseException:  # KeyboardInterrupt, a cancelled caller...: never leave the worker running
            self.kill()
            self.proc.wait()
            self.close_input()
            self._release()
            raise
        self.close_input()
        limits = self._release()
        reply = self._reply(ended, bool(limits.get("oom_kills")))
        reply.limits = limits
        return reply

    def _release(self) -> dict[str, Any]:
        """What the job's cgroup measured; the group is removed (its leftovers killed)."""
        group, self.group = self.group, None
        if group is None:
            return {}
        usage = dict(group.usage())
        group.close()
        return usage

    def _reply(self, ended: bool, oom: bool = False) -> Reply:
        for pipe in (self.result_pipe, self.stdout, self.stderr):
            pipe.thread.join(READER_GRACE)
        stderr = self.stderr.text()
        if self.stdout.total:
            stderr = self.stdout.text() + stderr
        if not ended:
            if self.cancel is not None and self.cancel.is_set():
                return self._failure("sim_cancelled", "cancelled while running", stderr)
            return self._failure("sim_timeout", f"the kernel did not finish within {self.timeout:g} s "
                                 "(infinite loop?)", stderr)
        pipe = self.result_pipe
        if pipe.overflowed:
            return self._failure("sim_output_limit", f"the worker's reply exceeded {pipe.limit} bytes", stderr)
        if pipe.error and self.proc.returncode == 0:
            return self._failure("sim_worker_crash", f"the worker's reply is malformed: {pipe.error}", stderr)
        if pipe.frames and not pipe.error and not (pipe.splitter is not None and pipe.splitter.buf):
            body, arrays = pipe.frames[-1]  # the reply; earlier frames were streamed (``stream``)
            return Reply(body, arrays, self.sandbox, stderr[-STDERR_TAIL:])
        if pipe.splitter is not None and pipe.splitter.buf and self.proc.returncode == 0:
            return self._failure("sim_worker_crash", "the worker's reply is truncated", stderr)
        rc = self.proc.returncode
        if rc == jail_cgroup.JOIN_FAILED and "cannot join the job's cgroup" in stderr:
            return self._failure("sim_worker_crash", "the worker could not be put into its cgroup", stderr)
        # a signal: -N for the process we started; bwrap reports its child's signal N as 128 + N
        sig = -rc if rc < 0 else rc - 128 if rc > 128 and self.sandbox == jail.JAIL else 0
        if "MemoryError" in stderr or (oom and sig == signal.SIGKILL):
            return self._failure("sim_memory_limit", "the simulation worker was stopped (memory limit)", stderr)
        if sig == signal.SIGXCPU:
            return self._failure("sim_timeout", "the simulation worker was stopped (CPU time limit)", stderr)
        if sig == signal.SIGKILL:
            return self._failure("sim_worker_crash", "the simulation worker was killed (signal 9: the machine ran "
                                 "out of memory, or something outside killed it)", stderr)
        return self._failure("sim_worker_crash", f"the simulation worker exited with status {rc}", stderr)

    def _wait(self) -> bool:
        """True once the worker exited; False after killing it (cancelled or out of time)."""
        while True:
            step = self.deadline - time.monotonic()
            if self.cancel is not None:
                step = min(step, CANCEL_POLL)
            try:
                self.proc.wait(timeout=max(step, 0.0))
                return not (self.killed and not self.result_pipe.overflowed)
            except subprocess.TimeoutExpired:
                if (self.cancel is not None and self.cancel.is_set()) or time.monotonic() >= self.deadline:
                    self.kill()
                    self.proc.wait()
                    return False

    def _failure(self, code: str, message: str, stderr: str = "") -> Reply:
        path = self.job.request.get("kernel") or self.job.request.get("task") or "?"
        tail = stderr.strip()[-800:]
        problem = Problem(code, message + (f"\n{tail}" if tail and code == "sim_worker_crash" else ""),
                          location=SourceLocation(path, 1))
        return Reply({"ok": True, "problem": problem.as_dict()}, [], self.sandbox, stderr[-STDERR_TAIL:], True)


def _widen(fd: int) -> None:
    try:
        import fcntl

        fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, OSError):  # not Linux, or above /proc/sys/fs/pipe-max-size: the default works too
        pass


def _group(memory_bytes: int, tasks: int) -> jail_cgroup.JobGroup | None:
    """A control group for one job, or None where the host has none for us (the worker's fallback applies)."""
    where = jail_cgroup.host()
    if not where.available:
        return None
    try:
        return jail_cgroup.JobGroup(where, memory_bytes, tasks, CPUS)
    except OSError:
        return None


def imports_only(job: Job) -> bool:
    """Whether ``job``'s jail binds only its entry files and their imports (kernel code runs in it)."""
    if job.imports_only is not None:
        return job.imports_only
    return job.request.get("op") in IMPORTS_ONLY_OPS and job.request.get("role") != "device"


def _readable(job: Job) -> tuple[str, ...]:
    """What the jail binds of the user's files besides ``job.readable``: for kernel code, the kernel (and,
    when the same process loads it, task) file and the modules each imports; else the folders of the
    request's kernel and task files and its search path. Always the SDK path (the Neuron SDK's folders
    when they are not in the Python installation: ``NKI_AGENT_SDK_PATH``)."""
    req = job.request
    out = list(job.readable)
    if imports_only(job):
        sp = [p for p in req.get("search_path") or () if isinstance(p, str) and p]
        keys = ("kernel",) if req.get("op") in ("kernel", "trace") else ("kernel", "task")
        entries = [(os.path.abspath(p), [os.path.dirname(os.path.abspath(p)), *sp])
                   for p in (req.get(k) for k in keys) if isinstance(p, str) and p and os.path.isfile(p)]
        out += jail_imports.binds(entries, job.hidden)
        out += [p for p in req.get("sdk_path") or () if isinstance(p, str) and p]
        return tuple(p for p in dict.fromkeys(out) if os.path.exists(p))
    for key in ("kernel", "task"):
        p = req.get(key)
        if isinstance(p, str) and p:
            out.append(os.path.dirname(os.path.abspath(p)))
    for key in ("search_path", "sdk_path"):
        out += [p for p in req.get(key) or () if isinstance(p, str) and p]
    return tuple(p for p in dict.fromkeys(out) if os.path.isdir(p))


def start(job: Job, timeout: float = DEFAULT_TIMEOUT, memory_bytes: int = DEFAULT_MEMORY,
          cancel: threading.Event | None = None) -> Worker:
    return Worker(job, timeout, memory_bytes, cancel)


def run_job(job: Job, timeout: float = DEFAULT_TIMEOUT, memory_bytes: int = DEFAULT_MEMORY,
            cancel: threading.Event | None = None) -> Reply:
    """Run one job to its end; a set ``cancel`` kills it and answers ``sim_cancelled``."""
    if cancel is not None and cancel.is_set():
        path = job.request.get("kernel") or "?"
        p = Problem("sim_cancelled", "cancelled before it started", location=SourceLocation(path, 1))
        return Reply({"ok": True, "problem": p.as_dict()}, [], jail.status().label, "", True)
    try:
        w = start(job, timeout, memory_bytes, cancel)
    except jail.JailError as e:
        p = Problem("sim_bad_input", str(e), location=SourceLocation(job.request.get("kernel") or "?", 1))
        return Reply({"ok": True, "problem": p.as_dict()}, [], jail.status().label, "", True)
    w.close_input()
    return w.result()


def run(request: dict[str, Any], timeout: float = DEFAULT_TIMEOUT, memory_bytes: int = DEFAULT_MEMORY,
        cancel: threading.Event | None = None) -> dict[str, Any]:
    """One request without arrays; its reply body with ``sandbox`` and ``stderr`` added."""
    reply = run_job(Job(request), timeout, memory_bytes, cancel)
    body = dict(reply.body)
    body["stderr"], body["sandbox"] = reply.stderr, reply.sandbox
    return body
