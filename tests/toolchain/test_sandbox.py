"""Hostile and broken inputs through the sandboxed worker: always one clear problem, never a hang or crash."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from nki_agent.toolchain import api
from nki_agent.toolchain.check import check_file
from nki_agent.toolchain.protocol.jobs import VerifyResult

HOSTILE = Path(__file__).resolve().parents[1] / "fixtures" / "hostile"
BROKEN = Path(__file__).resolve().parents[1] / "fixtures" / "broken"
# the wall-clock limit of runs that must finish: only an upper bound against a hang, generous enough for a
# loaded 2-core machine (the default 60 s once ended an honest long-trace run there)
FINISHES = 300.0


def _codes(res: VerifyResult) -> list[str]:
    return [p.code for p in res.problems]


@pytest.mark.parametrize(
    ("name", "code", "timeout"),
    [
        ("infinite_loop.py", "sim_timeout", 6.0),
        ("nki_loop_forever.py", "sim_timeout", 6.0),
        # filling the 6 GiB address-space cap takes ~10 s here, much longer on a loaded machine: the wall
        # limit must not be what ends these (the memory limit must)
        ("unbounded_alloc.py", "sim_memory_limit", 180.0),
        ("huge_hbm_tensor.py", "sim_memory_limit", 180.0),
        ("raises_at_import.py", "sim_python_exception", 30.0),
        ("exits.py", "sim_worker_crash", 30.0),
        ("deep_recursion.py", "sim_python_exception", 30.0),
    ],
)
def test_hostile_kernel_gives_one_clear_problem(name: str, code: str, timeout: float) -> None:
    path = str(HOSTILE / name)
    res = api.verify(path, path, seeds=1, timeout=timeout)
    assert res.correct is False
    assert _codes(res)[:1] == [code], res.problems
    assert res.problems[0].message


def test_kernel_stdout_cannot_forge_the_result() -> None:
    path = str(HOSTILE / "prints_to_stdout.py")
    res = api.verify(path, path, seeds=1, timeout=FINISHES)
    assert res.correct is True, res.problems


def test_sandbox_and_in_process_agree_on_a_broken_kernel() -> None:
    path = str(BROKEN / "partition_exceed.py")
    a = api.verify(path, path, seeds=1, timeout=FINISHES)
    b = api.verify(path, path, seeds=1, isolate=False)
    assert _codes(a) == _codes(b) == ["err_num_partition_exceed_arch_limit"]
    assert a.problems[0].location == b.problems[0].location


def test_missing_files_are_a_clear_problem(tmp_path: Path) -> None:
    res = api.verify(str(tmp_path / "nope.py"), str(tmp_path / "nope_task.py"), seeds=1)
    assert _codes(res) == ["sim_bad_input"]


def test_binary_file(tmp_path: Path) -> None:
    p = tmp_path / "blob.py"
    p.write_bytes(os.urandom(4096) + b"\x00")
    res = check_file(str(p))
    assert [x.code for x in res.problems] == ["sim_bad_input"]
    assert res.problems[0].severity == "info"
    assert api.verify(str(p), str(p), seeds=1).problems[0].code == "sim_bad_input"


def test_50mb_file_is_refused_quickly(tmp_path: Path) -> None:
    p = tmp_path / "huge.py"
    with open(p, "w") as f:
        line = "x = 1  # " + "a" * 90 + "\n"
        f.writelines(line for _ in range(50 * 1024 * 1024 // len(line) + 1))
    assert p.stat().st_size >= 50 * 1024 * 1024
    res = check_file(str(p))
    assert [x.code for x in res.problems] == ["sim_bad_input"]
    assert "bytes" in res.problems[0].message
    assert api.verify(str(p), str(p), seeds=1).problems[0].code == "sim_bad_input"


def test_non_kernel_python_file(tmp_path: Path) -> None:
    p = tmp_path / "plain.py"
    p.write_text("def f(x):\n    return x + 1\n")
    assert check_file(str(p)).problems == []
    res = api.verify(str(p), str(p), seeds=1)
    assert _codes(res) == ["sim_task_error"]


def test_deeply_nested_source(tmp_path: Path) -> None:
    p = tmp_path / "nested.py"
    p.write_text("x = " + "(" * 5000 + "1" + ")" * 5000 + "\n")
    res = check_file(str(p))
    assert len(res.problems) == 1
    assert api.verify(str(p), str(p), seeds=1).problems


def test_cancel_kills_a_running_worker() -> None:
    """Cancelling ends an endless kernel long before its 120 s limit (sim_timeout would mean it was ignored)."""
    import threading

    path = str(HOSTILE / "infinite_loop.py")
    cancel = threading.Event()
    timer = threading.Timer(1.0, cancel.set)
    timer.start()
    try:
        res = api.verify(path, path, seeds=1, timeout=120.0, cancel=cancel)
    finally:
        timer.cancel()
    assert _codes(res) == ["sim_cancelled"]


def test_cancel_before_start_runs_nothing() -> None:
    import threading

    cancel = threading.Event()
    cancel.set()
    path = str(HOSTILE / "infinite_loop.py")
    assert _codes(api.verify(path, path, seeds=1, cancel=cancel)) == ["sim_cancelled"]


CONFINED = Path(__file__).resolve().parents[1] / "fixtures" / "confined"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_a_result_larger_than_the_pipe_buffer_is_read_while_the_worker_runs() -> None:
    """~1200 traced instructions make a >64 KiB result; reading it only after exit used to deadlock."""
    import json

    from nki_agent.toolchain.isolation import sandbox

    req = {"op": "simulate", "kernel": str(EXAMPLES / "l1_add" / "kernel_classic.py"),
           "task": str(CONFINED / "long_trace_task.py")}
    reply = sandbox.run(req, timeout=FINISHES)
    assert "result" in reply, reply
    assert len(json.dumps(reply["result"])) > 64 * 1024
    assert reply["result"]["ran"] is True, reply["result"]["problems"]
    res = api.verify(req["kernel"], req["task"], seeds=1, timeout=FINISHES)  # the judge's two workers: the same holds
    assert len(res.model_dump_json()) > 64 * 1024
    assert res.correct is True, res.problems


def test_keyboard_interrupt_while_waiting_kills_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    import signal
    import subprocess
    import threading

    from nki_agent.toolchain.isolation import sandbox

    started: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen(*a: object, **k: object) -> subprocess.Popen[bytes]:
        proc = real_popen(*a, **k)  # type: ignore[call-overload]
        started.append(proc)
        return proc  # type: ignore[no-any-return]

    class Interrupting(threading.Event):
        """Not set before the start; the first look while the worker runs is a Ctrl-C."""

        looks = 0

        def is_set(self) -> bool:
            self.looks += 1
            if self.looks > 1:
                raise KeyboardInterrupt
            return False

    monkeypatch.setattr(sandbox.subprocess, "Popen", popen)
    path = str(HOSTILE / "infinite_loop.py")
    with pytest.raises(KeyboardInterrupt):
        sandbox.run({"op": "simulate", "kernel": path, "task": path}, timeout=120.0, cancel=Interrupting())
    assert len(started) == 1
    assert started[0].returncode == -signal.SIGKILL  # killed and reaped before the interrupt propagated


_ORPHANING_PARENT = """
import os, subprocess, sys, threading, time
from nki_agent.toolchain.isolation import sandbox

started = threading.Event()
pids = []
real_popen = subprocess.Popen

class Recording(real_popen):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        pids.append(self.pid)
        started.set()

subprocess.Popen = Recording
path, marker = sys.argv[1], sys.argv[2]
# the kernel's jail binds only the kernel and its imports: the FIFO is given to it explicitly
job = sandbox.Job({"op": "simulate", "kernel": path, "task": path}, readable=(marker,))
threading.Thread(target=sandbox.run_job, args=(job,), kwargs={"timeout": 120.0}, daemon=True).start()
started.wait(60)
with open(marker) as fifo:  # blocks until the worker, running the kernel module, writes it (jailed: read-only
    loaded = fifo.read() == "loaded"  # folder, but a FIFO there can still be written)
print(pids[0], loaded, flush=True)
os._exit(0)  # dies without any cleanup: the worker must not outlive it
"""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="PR_SET_PDEATHSIG and /proc are Linux-only")
def test_worker_dies_with_its_parent_process(tmp_path: Path) -> None:
    """The parent os._exit()s while the worker spins in kernel code; the kernel kills the worker too."""
    import signal
    import subprocess
    import sys

    kernel = tmp_path / "loop_after_marker.py"
    kernel.write_text((CONFINED / "loop_after_marker.py").read_text())
    marker = tmp_path / "marker.fifo"
    os.mkfifo(marker)
    helper = subprocess.run([sys.executable, "-c", _ORPHANING_PARENT, str(kernel), str(marker)],
                            capture_output=True, text=True, timeout=120, check=False)
    pid_text, loaded = helper.stdout.split()
    pid = int(pid_text)
    assert loaded == "True", helper.stderr
    try:
        # wait on the worker's exit itself (a pidfd turns readable when it ends): the kernel delivers SIGKILL
        # when the parent dies; 120 s only bounds a failure
        import select

        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            fd = -1  # already gone
        if fd >= 0:
            try:
                select.select([fd], [], [], 120.0)
            finally:
                os.close(fd)
        assert not _running(pid), "the worker outlived its parent"
    finally:
        if _running(pid):
            os.killpg(pid, signal.SIGKILL)  # the worker leads its own session; never leave it spinning


def test_a_worker_killed_from_outside_is_a_crash_not_a_memory_limit() -> None:
    """SIGKILL of the jail (bwrap) itself, as an operator or the OOM killer would: a clear crash."""
    import signal

    from nki_agent.toolchain.isolation import sandbox

    path = str(HOSTILE / "infinite_loop.py")
    w = sandbox.start(sandbox.Job({"op": "simulate", "kernel": path, "task": path, "seed": 0}), timeout=120.0)
    w.close_input()
    os.kill(w.proc.pid, signal.SIGKILL)  # the process we started: bwrap, or the plain worker unjailed
    reply = w.result()
    assert reply.failed
    assert reply.body["problem"]["code"] == "sim_worker_crash", reply.body
    assert "signal 9" in reply.body["problem"]["message"]
