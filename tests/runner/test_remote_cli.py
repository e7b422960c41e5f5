"""The command line on a remote runner: ``profile --runner``, ``watch --once --runner``, ``use_runner``, and the
watcher's change handling (debounce, dependencies) on a fake clock.

Commands run as real subprocesses (``runner.use`` is process-wide, and a CLI process is what users
run) against runners from ``conftest.py``.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from nki_agent.runner.client import RemoteRunner, RunnerUnavailable
from nki_agent.toolchain.isolation import runner
from nki_agent.toolchain.protocol.jobs import ProfileResult, SeedFigures, VerifyResult
from remote_kernels import ROOT, sibling_project, small_add

from nki_agent.cli import remote
from nki_agent.cli.watch import Watcher

PSUM = ROOT / "tests" / "fixtures" / "broken" / "psum_overflow.py"


def cli(*args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NKI_AGENT_RUNNER_TOKEN"}
    return subprocess.run([sys.executable, "-m", "nki_agent", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False, env=env)


def test_profile_on_a_runner_prints_the_model_or_a_table(runner_process, tmp_path: Path) -> None:
    kernel, task = small_add(tmp_path / "proj")
    token_file = tmp_path / "token"
    token_file.write_text(f"{runner_process.token}\n")
    common = ("profile", str(kernel), "--task", str(task), "--seeds", "2", "--runner", runner_process.url,
              "--token-file", str(token_file))
    proc = cli(*common, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = ProfileResult.model_validate_json(proc.stdout)
    assert res.correct and res.runner == runner_process.url and res.kernel == str(kernel)
    assert res.latency.kind in ("not measured", "estimated") and [s.seed for s in res.seeds if not s.hidden] == [0, 1]
    table = cli(*common)
    assert table.returncode == 0, table.stdout + table.stderr
    for shown in ("not measured", runner_process.url, "simulator", "yes on 2 seed(s) + 1 hidden"):
        assert shown in table.stdout, table.stdout
    assert runner_process.token not in table.stdout + table.stderr + proc.stdout


def test_profile_with_a_dead_runner_says_so_once(dead_url: str, tmp_path: Path) -> None:
    kernel, task = small_add(tmp_path / "proj")
    proc = cli("profile", str(kernel), "--task", str(task), "--runner", dead_url)
    assert proc.returncode == remote.RUNNER_FAILED, proc.stdout + proc.stderr
    assert f"runner {dead_url}: connection refused" in proc.stderr and "Traceback" not in proc.stderr


def test_watch_once_verifies_every_kernel_on_the_runner(runner_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "kernels"
    small_add(folder / "good")
    sibling_project(folder / "helpers")
    (folder / "broken").mkdir()
    shutil.copy(PSUM, folder / "broken" / "psum_overflow.py")  # its own task
    (folder / "lonely").mkdir()
    shutil.copy(ROOT / "examples" / "l1_add" / "kernel_new.py", folder / "lonely" / "kernel.py")  # no task
    (folder / "good" / "notes.py").write_text("def f(:\n")  # not a kernel: ignored
    proc = cli("watch", str(folder), "--once", "--seeds", "1", "--runner", runner_url, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    by_file = {ln.split()[1]: ln for ln in lines if ln[:1] in "✓✗-"}
    assert set(by_file) == {"kernels/good/add_kernel.py", "kernels/helpers/kernel.py",
                            "kernels/broken/psum_overflow.py", "kernels/lonely/kernel.py"}, lines
    assert by_file["kernels/good/add_kernel.py"].startswith("✓") and runner_url in by_file["kernels/good/add_kernel.py"]
    assert "1 seed(s) + 1 hidden" in by_file["kernels/good/add_kernel.py"]
    assert by_file["kernels/helpers/kernel.py"].startswith("✓")
    assert by_file["kernels/broken/psum_overflow.py"].startswith("✗")
    assert "err_stack_overflow_psum" in by_file["kernels/broken/psum_overflow.py"]
    assert by_file["kernels/lonely/kernel.py"].startswith("- ") and "no task" in by_file["kernels/lonely/kernel.py"]


def test_watch_once_locally_exits_0_when_all_are_correct(tmp_path: Path) -> None:
    small_add(tmp_path / "k")
    proc = cli("watch", str(tmp_path / "k"), "--once", "--seeds", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("✓ k/add_kernel.py  correct on 1 seed(s)") and "[local" in proc.stdout


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_of_changes_to_a_helper_reverifies_its_kernel_once(tmp_path: Path) -> None:
    kernel, _ = sibling_project(tmp_path / "proj")
    other, _ = small_add(tmp_path / "other")
    clock, calls, lines = _Clock(), [], []

    def fake_verify(path: str, task: str, **kw: object) -> VerifyResult:
        calls.append(path)
        return VerifyResult(kernel=path, task=task, compiled=True, correct=True, runner="local",
                            seeds=[SeedFigures(seed=0, correct=True)])

    w = Watcher(str(tmp_path), None, 1, None, 10.0, lines.append, clock=clock, debounce=0.5, verify=fake_verify)
    assert w.scan() == sorted([str(kernel), str(other)])
    assert w.once(w.scan()) and len(calls) == 2
    calls.clear()
    for _ in range(5):
        w.changed(str(tmp_path / "proj" / "tile_ops.py"))  # imported by tile_helpers, imported by the kernel
    assert list(w.pending) == [str(kernel)] and w.run_due() == 0  # still in its quiet period
    clock.now += 0.6
    assert w.run_due() == 1 and calls == [str(kernel)]
    assert lines[-1].startswith("✓ ") and lines[-1].endswith("[local]")
    new = tmp_path / "other" / "second.py"
    new.write_text((tmp_path / "other" / "add_kernel.py").read_text())
    w.changed(str(new))  # a new kernel file is picked up
    clock.now += 1
    assert w.run_due() == 1 and calls[-1] == str(new)
    new.unlink()
    w.changed(str(new))  # deleted: dropped, not verified
    clock.now += 1
    assert w.run_due() == 0 and str(new) not in w.kernels


def test_a_crashing_verification_is_a_line_not_the_end(tmp_path: Path) -> None:
    small_add(tmp_path / "k")
    lines: list[str] = []

    def unreachable(path: str, task: str, **kw: object) -> VerifyResult:
        raise RunnerUnavailable("http://127.0.0.1:9", "connection refused")

    w = Watcher(str(tmp_path), None, 1, None, 10.0, lines.append, verify=unreachable)
    assert not w.once(w.scan())
    assert len(lines) == 1 and lines[0].startswith("✗ ")
    assert lines[0].endswith("add_kernel.py  runner http://127.0.0.1:9: connection refused")


def test_use_runner_installs_and_restores_and_turns_runner_errors_into_exit_3(dead_url: str,
                                                                              tmp_path: Path) -> None:
    before = runner.current()
    with remote.use_runner(None) as none:
        assert none is None and runner.current() is before
    token = tmp_path / "token"
    token.write_text("\n  file-token-0123456789abcdef  \n")
    assert remote.read_token(str(token)) == "file-token-0123456789abcdef"
    with pytest.raises(typer.Exit) as ended, remote.use_runner(dead_url, str(token)) as installed:
        assert isinstance(installed, RemoteRunner) and runner.current() is installed
        installed.health()
    assert ended.value.exit_code == remote.RUNNER_FAILED and runner.current() is before
    with pytest.raises(typer.BadParameter):
        remote.read_token(str(tmp_path / "missing"))
    with pytest.raises(typer.BadParameter), remote.use_runner("localhost:8765"):
        pass
    assert runner.current() is before


def _next_line(proc: subprocess.Popen[str], deadline: float) -> str:
    """The next stdout line of ``proc`` (bounded by ``deadline``; '' when it ended or the time is up)."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(max(0.0, deadline - time.monotonic())):
            return ""
        return proc.stdout.readline()


def test_watch_reverifies_on_a_change_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """The live loop: inotify (watchdog) sees the helper change; SIGINT ends it cleanly."""
    sibling_project(tmp_path / "proj")
    env = {k: v for k, v in os.environ.items() if k != "NKI_AGENT_RUNNER_TOKEN"} | {"PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "nki_agent", "watch", ".", "--seeds", "1"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    try:
        seen = [_next_line(proc, deadline), _next_line(proc, deadline)]
        assert seen[0].startswith("✓ proj/kernel.py") and seen[1].startswith("watching ."), seen
        ops = tmp_path / "proj" / "tile_ops.py"
        tmp = ops.with_suffix(".tmp")  # an editor's atomic save (a move onto the file): one consistent change
        tmp.write_text(ops.read_text().replace("nl.add", "nl.subtract"))  # a sibling of a sibling: now wrong
        os.replace(tmp, ops)
        changed = _next_line(proc, deadline)
        assert changed.startswith("✗ proj/kernel.py  INCORRECT"), changed
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.strip().endswith("stopped") and "Traceback" not in err
