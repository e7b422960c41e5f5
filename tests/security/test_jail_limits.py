"""The jail's resource limits, measured: memory (tmpfs pages included), tasks (threads) and ``/dev``.

Each hostile kernel runs through ``sandbox.run_job`` with the ``simulate`` op (the path ``api.simulate``
takes) twice where the host allows a cgroup per job — once in its cgroup (``jail_cgroup.host()``: v2, or
v1 as on this project's CI machine) and once with the fallback forced (``NKI_AGENT_CGROUP=off``: rlimits,
the worker's thread cap, tmpfs size caps) — and only the fallback where it does not:

- the thread bomb (``res_thread_bomb``: up to 3000 threads) starts fewer than ``sandbox.TASKS``; in a
  cgroup the group saw its ``pids.max`` refuse tasks and never held more;
- the ``/dev/shm`` fill (``res_shm_fill``: up to 512 MiB) writes at most ``jail.SHM_BYTES``; in a cgroup
  the group's peak memory stays under its ``memory.max`` (``jail.memory_budget``);
- the memory bomb (``res_memory_bomb``) ends as a memory-limit problem under the same peak.

The v2 code path runs here on a fake cgroup2 folder (files where the kernel would enforce; what is
checked is what gets written and that the jail joins the group before bwrap starts). Another test
shows the kernel semantics the fallback relies on for a non-root user: ``RLIMIT_NPROC`` set inside a
jail counts only the jail's own tasks (its user namespace), so threads stop there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nki_agent.toolchain.isolation import jail, jail_cgroup, sandbox
from security_helpers import CORPUS, TASK

TIMEOUT = 120.0  # generous: each kernel here ends in a few seconds unless a limit is missing
MODES = ["cgroup", "fallback"] if jail_cgroup.host().available else ["fallback"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "fallback":
        monkeypatch.setenv(jail_cgroup.ENV, "off")
    else:
        monkeypatch.delenv(jail_cgroup.ENV, raising=False)
    yield request.param


def _run(tmp_path: Path, name: str) -> sandbox.Reply:
    folder = tmp_path / "user"
    folder.mkdir(exist_ok=True)
    shutil.copy(TASK, folder / "task.py")
    kernel = folder / f"{name}.py"
    kernel.write_text((CORPUS / f"{name}.py").read_text().replace("{{TOKEN}}", f"limits{os.getpid()}"))
    job = sandbox.Job({"op": "simulate", "kernel": str(kernel), "task": str(folder / "task.py"), "seed": 0})
    return sandbox.run_job(job, timeout=TIMEOUT)


def _figure(reply: sandbox.Reply, label: str) -> int:
    found = re.findall(rf"{label}: (\d+)", reply.stderr)
    assert found, f"the kernel did not report {label!r}: {reply.body} {reply.stderr[-2000:]}"
    return int(found[-1])


def _check_group(reply: sandbox.Reply, mode: str) -> dict[str, Any]:
    assert reply.sandbox == jail.JAIL, reply.body
    if mode == "fallback":
        assert reply.limits == {}, reply.limits
        return {}
    limits = reply.limits
    assert limits["cgroup"] == jail_cgroup.host().mode, limits
    assert limits["tasks_max"] == sandbox.TASKS
    assert limits["memory_max"] == jail.memory_budget(sandbox.DEFAULT_MEMORY), limits
    if "memory_peak" in limits:
        assert limits["memory_peak"] <= limits["memory_max"], limits
    return limits


def test_a_thread_bomb_stops_at_the_jobs_task_cap(tmp_path: Path, mode: str) -> None:
    reply = _run(tmp_path, "res_thread_bomb")
    started = _figure(reply, "threads started")
    assert 0 < started < sandbox.TASKS, (started, reply.limits)
    assert reply.body.get("ok") and not reply.failed, reply.body
    limits = _check_group(reply, mode)
    if mode == "cgroup":
        assert limits.get("tasks_refused", 1) >= 1, limits
        assert limits.get("tasks_peak", 0) <= sandbox.TASKS, limits


def test_a_dev_shm_fill_stops_at_its_cap(tmp_path: Path, mode: str) -> None:
    reply = _run(tmp_path, "res_shm_fill")
    written = _figure(reply, "shm bytes written")
    assert written <= jail.SHM_BYTES, written
    assert not list(Path("/dev/shm").glob(f"*limits{os.getpid()}*")) if os.path.isdir("/dev/shm") else True
    limits = _check_group(reply, mode)
    if mode == "cgroup" and "memory_peak" in limits:
        assert limits["memory_peak"] <= limits["memory_max"]


def test_a_memory_bomb_ends_within_the_jobs_memory_budget(tmp_path: Path, mode: str) -> None:
    reply = _run(tmp_path, "res_memory_bomb")
    problem = reply.body.get("problem") or (reply.body.get("result") or {}).get("problem") or {}
    text = str(reply.body)
    assert "sim_memory_limit" in text or problem.get("code") == "sim_memory_limit", text[:2000]
    _check_group(reply, mode)


def test_dev_holds_only_the_bound_devices_and_a_capped_read_only_tmpfs() -> None:
    code = ("import os, json\n"
            "s = os.statvfs('/dev/shm')\n"
            "try:\n open('/dev/new', 'w'); ro = False\n"
            "except OSError:\n ro = True\n"
            "print(json.dumps([sorted(os.listdir('/dev')), s.f_blocks * s.f_frsize, ro, len(os.urandom(8))]))\n")
    fds = jail.open_seccomp()
    try:
        done = subprocess.run(jail.command(jail.JailSpec(), [sys.executable, "-I", "-c", code],
                                           seccomp_fd=fds[0] if fds else None),
                              capture_output=True, text=True, env=jail.environment(), pass_fds=fds, timeout=TIMEOUT,
                              check=False)
    finally:
        for fd in fds:
            os.close(fd)
    import json

    listed, shm, read_only, random_bytes = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(listed) == {"null", "zero", "full", "random", "urandom", "shm", "fd", "stdin", "stdout", "stderr"}
    assert 0 < shm <= jail.SHM_BYTES and read_only and random_bytes == 8


def test_the_v2_path_writes_the_limits_and_joins_before_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake cgroup2 folder (plain files): the limits land in the job's group, the jail's first process
    writes itself into ``cgroup.procs`` before exec'ing bwrap, the reply carries the group's figures."""
    parent = tmp_path / "cg"
    parent.mkdir()
    (parent / "cgroup.controllers").write_text("cpu memory pids\n")
    (parent / "cgroup.subtree_control").write_text("cpu memory pids\n")  # a delegated parent: enabled for children
    monkeypatch.setenv(jail_cgroup.ENV, str(parent))
    where = jail_cgroup.host()
    assert where.mode == "v2" and where.parents == (("unified", str(parent)),), where
    group = jail_cgroup.JobGroup(where, 123 << 20, 77, 1.0)
    d = Path(group.dirs["unified"])
    assert (d / "memory.max").read_text() == str(123 << 20) and (d / "pids.max").read_text() == "77"
    (d / "cpu.max").write_text("")  # a real group has it: the quota is written only where it exists
    done = subprocess.run(group.wrap(["/bin/sh", "-c", "echo started"]), capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)
    assert done.returncode == 0 and done.stdout == "started\n", done
    assert (d / "cgroup.procs").read_text() == "0"  # the shell wrote itself ("0") before exec
    (d / "memory.peak").write_text("4096\n")
    (d / "pids.events").write_text("max 3\n")
    usage = group.usage()
    assert usage == {"cgroup": "v2", "memory_max": 123 << 20, "tasks_max": 77, "memory_peak": 4096,
                     "tasks_refused": 3}, usage
    for f in d.iterdir():
        f.unlink()
    group.close()
    assert not d.exists()
    job = sandbox.Job({"op": "describe", "task": str(TASK)})
    reply = sandbox.run_job(job, timeout=TIMEOUT)
    assert reply.limits.get("cgroup") == "v2" and reply.limits["tasks_max"] == sandbox.TASKS, reply.limits
    assert reply.body.get("ok"), reply.body


def test_a_group_that_cannot_be_joined_is_a_clear_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parent = tmp_path / "cg"
    parent.mkdir()
    (parent / "cgroup.controllers").write_text("memory pids\n")
    (parent / "cgroup.subtree_control").write_text("memory pids\n")
    monkeypatch.setenv(jail_cgroup.ENV, str(parent))
    real = jail_cgroup.JobGroup.procs
    monkeypatch.setattr(jail_cgroup.JobGroup, "procs", property(lambda self: (str(tmp_path / "no" / "procs"),)))
    reply = sandbox.run_job(sandbox.Job({"op": "describe", "task": str(TASK)}), timeout=TIMEOUT)
    monkeypatch.setattr(jail_cgroup.JobGroup, "procs", real)
    assert reply.failed and reply.body["problem"]["code"] == "sim_worker_crash", reply.body
    assert "cgroup" in reply.body["problem"]["message"]


NOBODY_PYTHON = "/usr/bin/python3"
NPROC_PROBE = ("import resource, threading\n"
               "resource.setrlimit(resource.RLIMIT_NPROC, (20, 20))\n"
               "release, n = threading.Event(), 0\n"
               "try:\n"
               "    for _ in range(200):\n"
               "        threading.Thread(target=release.wait, args=(30,), daemon=True).start(); n += 1\n"
               "except RuntimeError:\n"
               "    pass\n"
               "release.set(); print(n)\n")


@pytest.mark.skip_allowed
@pytest.mark.skipif(os.geteuid() == 0 and not os.path.exists(NOBODY_PYTHON),
                    reason="root, and no system Python to run the jail as another user")
def test_rlimit_nproc_in_a_jail_counts_only_its_own_tasks_for_a_non_root_user() -> None:
    """The fallback's hard task bound for a non-root user: inside the jail's user namespace the kernel counts
    only the jail's tasks against ``RLIMIT_NPROC`` (threads included), whatever else the user runs. As root
    (exempt) the test runs the jail as nobody."""
    bwrap = jail.status().binary
    argv = [bwrap, "--unshare-user", "--unshare-pid", "--uid", "65534", "--gid", "65534", "--ro-bind", "/", "/",
            "--proc", "/proc", "--dev", "/dev", "--die-with-parent", "--", NOBODY_PYTHON if os.geteuid() == 0 else sys.executable, "-I", "-c", NPROC_PROBE]
    extra: dict[str, Any] = {"user": 65534, "group": 65534, "extra_groups": []} if os.geteuid() == 0 else {}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, check=False, env=jail.environment(),
                          **extra)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.strip()) < 20, done.stdout
