"""Neuron devices and extra variables in the jail: only /dev/neuronN, only NEURON_* / XLA_* names; a
device that does not exist is refused before bwrap starts; the worker sees exactly what its job gave it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from nki_agent.toolchain.isolation import jail, sandbox

ROOT = Path(__file__).resolve().parents[2]
ADD = ROOT / "examples" / "l1_add"
JAILED = jail.status().available
needs_jail = pytest.mark.skipif(not JAILED, reason=f"no jail here: {jail.status().reason}")


@pytest.mark.parametrize("path", ["/dev/sda", "/dev/neuron", "/dev/neuron0/../sda", "/dev//neuron0", "neuron0",
                                  "/tmp/neuron0", "/dev/neuron0x", "/dev/neuron-1", "/dev/shm", "/dev/neuron0/"])
def test_only_neuron_device_paths_are_accepted(path: str) -> None:
    with pytest.raises(jail.JailError, match="only be given Neuron device files"):
        sandbox.Job({"op": "simulate"}, devices=(path,))


def test_neuron_device_paths_pass_the_static_check() -> None:
    job = sandbox.Job({"op": "simulate"}, devices=("/dev/neuron0", "/dev/neuron12", "/dev/neuron0"))
    assert job.devices == ("/dev/neuron0", "/dev/neuron12")


@pytest.mark.parametrize("name", ["PATH", "LD_PRELOAD", "PYTHONPATH", "HOME", "NKI_AGENT_RESULT_FD", "neuron_rt_x",
                                  "NEURON_", "AWS_SECRET_ACCESS_KEY", "NEURON_RT_VISIBLE_CORES=1"])
def test_variables_outside_the_allow_list_are_refused(name: str) -> None:
    with pytest.raises(jail.JailError, match="refused"):
        sandbox.Job({"op": "simulate"}, env=((name, "1"),))


def test_allowed_variables_and_their_values() -> None:
    job = sandbox.Job({"op": "simulate"}, env={"NEURON_RT_VISIBLE_CORES": "3", "XLA_FLAGS": "--x", "NEURON_CC_FLAGS": ""})
    assert dict(job.env) == {"NEURON_RT_VISIBLE_CORES": "3", "XLA_FLAGS": "--x", "NEURON_CC_FLAGS": ""}
    with pytest.raises(jail.JailError, match="NUL"):
        sandbox.Job({"op": "simulate"}, env={"NEURON_RT_VISIBLE_CORES": "0\0LD_PRELOAD=x"})
    with pytest.raises(jail.JailError, match="pair"):
        sandbox.Job({"op": "simulate"}, env=(("NEURON_X",),))  # type: ignore[arg-type]


def _no_process(*args: object, **kwargs: object) -> None:
    raise AssertionError("bwrap must not start for a refused device")


def test_a_missing_device_is_refused_before_bwrap_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "neuron0").write_text("fake device 0")
    monkeypatch.setenv(jail.TEST_DEVICE_DIR, str(tmp_path))
    monkeypatch.setattr(subprocess, "Popen", _no_process)
    job = sandbox.Job({"op": "simulate", "kernel": "k.py"}, devices=("/dev/neuron7",))
    with pytest.raises(jail.JailError, match="/dev/neuron7 does not exist"):
        sandbox.start(job)
    reply = sandbox.run_job(job)
    assert reply.failed and "does not exist" in reply.body["problem"]["message"]


def test_without_the_override_only_real_character_devices_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(jail.TEST_DEVICE_DIR, raising=False)
    monkeypatch.setattr(subprocess, "Popen", _no_process)
    missing = next(f"/dev/neuron{i}" for i in range(64) if not os.path.exists(f"/dev/neuron{i}"))
    with pytest.raises(jail.JailError, match="does not exist"):
        jail.device_binds([missing])
    assert jail.device_dir() == "/dev"


def test_the_override_only_admits_regular_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jail.TEST_DEVICE_DIR, str(tmp_path))
    (tmp_path / "secret").write_text("not a device")
    (tmp_path / "neuron0").symlink_to(tmp_path / "secret")
    (tmp_path / "neuron1").mkdir()
    (tmp_path / "neuron2").write_text("fake device 2")
    for dev in ("/dev/neuron0", "/dev/neuron1"):
        with pytest.raises(jail.JailError, match="not a regular file"):
            jail.device_binds([dev])
    assert jail.device_binds(["/dev/neuron2"]) == ((str(tmp_path / "neuron2"), "/dev/neuron2"),)


def test_the_command_line_binds_each_device_at_its_dev_path() -> None:
    spec = jail.JailSpec(devices=(("/tmp/x/neuron3", "/dev/neuron3"),))
    argv = jail.command(spec, ["python"], "bwrap", None)
    i = argv.index("/tmp/x/neuron3") - 1
    assert argv[i:i + 3] == ["--dev-bind", "/tmp/x/neuron3", "/dev/neuron3"]
    # on the jail's own /dev tmpfs, before it turns read-only (the mount point must be created)
    assert argv.index("/dev") < i < argv.index("--remount-ro")
    with pytest.raises(jail.JailError):
        jail.command(jail.JailSpec(devices=(("/etc", "/dev/../etc"),)), ["python"], "bwrap", None)


PROBE = '''import os, sys
print("ENV", sorted(k + "=" + v for k, v in os.environ.items() if k.startswith(("NEURON", "XLA"))), file=sys.stderr)
print("DEV", sorted(n for n in os.listdir("/dev") if n.startswith("neuron")), file=sys.stderr)
for n in sorted(os.listdir("/dev")):
    if n.startswith("neuron"):
        print("READ", n, open("/dev/" + n).read(), file=sys.stderr)
try:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    print("FORK ok", file=sys.stderr)
except OSError as e:
    print("FORK refused", e.errno, file=sys.stderr)
'''


def _probe_job(tmp_path: Path, **kw: object) -> sandbox.Reply:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "kernel.py").write_text(PROBE + (ADD / "kernel_new.py").read_text())
    (work / "task.py").write_text((ADD / "task.py").read_text().replace("2112, 1024", "128, 64"))
    job = sandbox.Job({"op": "simulate", "kernel": str(work / "kernel.py"), "task": str(work / "task.py")},
                      **kw)  # type: ignore[arg-type]
    return sandbox.run_job(job, timeout=120)


@needs_jail
def test_the_worker_sees_its_variables_and_only_its_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    devs = tmp_path / "dev"
    devs.mkdir()
    for i in range(2):
        (devs / f"neuron{i}").write_text(f"fake device {i}")
    monkeypatch.setenv(jail.TEST_DEVICE_DIR, str(devs))
    monkeypatch.setenv("NEURON_RT_LOG_LEVEL", "DEBUG")  # the parent's own NEURON_* variables do not leak in
    reply = _probe_job(tmp_path, devices=("/dev/neuron1",), env={"NEURON_RT_VISIBLE_CORES": "3"})
    assert not reply.failed, reply.body
    assert "ENV ['NEURON_RT_VISIBLE_CORES=3']" in reply.stderr
    assert "DEV ['neuron1']" in reply.stderr and "READ neuron1 fake device 1" in reply.stderr
    assert "FORK ok" in reply.stderr  # a device job runs the SDK, whose compiler is a child process


@needs_jail
def test_a_job_without_devices_sees_none_and_cannot_fork(tmp_path: Path) -> None:
    reply = _probe_job(tmp_path)
    assert "ENV []" in reply.stderr and "DEV []" in reply.stderr
    assert "FORK refused" in reply.stderr
