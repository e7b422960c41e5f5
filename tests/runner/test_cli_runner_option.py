"""``--runner URL`` on verify, simulate and fix: the job runs on a real runner process (127.0.0.1), the
answer says where it ran, and a dead runner is one message with exit status 3."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
L1_ADD = ROOT / "examples" / "l1_add"
BROKEN = ROOT / "tests" / "fixtures" / "quickfix" / "bool_and.py"


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nki_agent", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, check=False)


def _token_file(tmp_path: Path, token: str) -> str:
    p = tmp_path / "token"
    p.write_text(token + "\n")
    return str(p)


def test_verify_and_simulate_run_on_the_runner(runner_process, tmp_path: Path) -> None:
    tok = _token_file(tmp_path, runner_process.token)
    kernel, task = str(L1_ADD / "kernel_classic.py"), str(L1_ADD / "task.py")
    proc = _cli("verify", kernel, "--task", task, "--json", "--runner", runner_process.url, "--token-file", tok)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["correct"] and out["runner"] == runner_process.url and out["sandbox"] == "bwrap"
    assert out["kernel"] == kernel  # the client's own path, not the runner's job folder
    assert any(s["hidden"] for s in out["seeds"])  # the runner adds a seed the client never sees
    sim = _cli("simulate", kernel, "--task", task, "--json", "--runner", runner_process.url, "--token-file", tok)
    assert sim.returncode == 0, sim.stderr
    assert json.loads(sim.stdout)["runner"] == runner_process.url


def test_fix_verifies_its_candidates_on_the_runner(runner_process, tmp_path: Path) -> None:
    kernel = tmp_path / "bool_and.py"
    shutil.copy(BROKEN, kernel)
    tok = _token_file(tmp_path, runner_process.token)
    proc = _cli("fix", str(kernel), "--json", "--no-trajectory", "--runner", runner_process.url, "--token-file", tok)
    out = json.loads(proc.stdout)
    assert proc.returncode == 0 and out["verdict"] == "verified", proc.stdout + proc.stderr
    assert out["sandbox"] == "bwrap" and not out["refused"]
    assert kernel.read_text() == BROKEN.read_text()  # not applied without --apply


def test_a_dead_runner_is_exit_3_with_one_message(dead_url: str) -> None:
    proc = _cli("verify", str(L1_ADD / "kernel_classic.py"), "--task", str(L1_ADD / "task.py"), "--runner", dead_url)
    assert proc.returncode == 3
    assert dead_url in proc.stderr and proc.stderr.count("error:") == 1


def test_runner_and_in_process_do_not_mix(dead_url: str) -> None:
    proc = _cli("verify", str(L1_ADD / "kernel_classic.py"), "--task", str(L1_ADD / "task.py"), "--runner", dead_url,
                "--in-process")
    assert proc.returncode == 2 and "--in-process" in proc.stderr


def test_the_agents_profile_tool_asks_the_runner(runner_process) -> None:
    from nki_agent.agent.tools import ToolBox
    from nki_agent.runner.client import RemoteRunner
    from nki_agent.toolchain.isolation import runner
    from nki_agent.toolchain.protocol.jobs import ProfileResult

    kernel, task = L1_ADD / "kernel_classic.py", L1_ADD / "task.py"
    tools = ToolBox(str(kernel), kernel.read_text(), str(task), seeds=1)
    try:
        local = tools.profile()
        # without a runner: this machine's simulator and the cost model's estimate, labelled as such
        assert local.content.startswith("profile on the embedded simulator") and local.result is not None
        assert local.result.runner == "local" and local.result.latency.kind == "estimated"
        remote = RemoteRunner(runner_process.url, token=runner_process.token)
        previous = runner.use(remote)
        try:
            out = tools.profile()
        finally:
            runner.use(previous)
            remote.close()
        assert isinstance(out.result, ProfileResult) and out.result.correct
        assert out.content.startswith(f"profile on {runner_process.url} (simulator backend): correct")
        # the simulator backend never invents a measured latency: the cost model's, labelled est.
        assert " est. " in out.content and out.result.latency.kind == "estimated"
    finally:
        tools.close()


def test_a_task_a_comment_names_outside_the_folder_is_not_sent(dead_url: str, tmp_path: Path) -> None:
    """A cloned kernel's ``# nki-task: /elsewhere`` is not sent to a runner unless the user names it with --task."""
    proj, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    proj.mkdir()
    elsewhere.mkdir()
    shutil.copy(L1_ADD / "task.py", elsewhere / "task.py")
    kernel = proj / "kernel.py"
    kernel.write_text(f"# nki-task: {elsewhere / 'task.py'}\n" + (L1_ADD / "kernel_new.py").read_text())
    for cmd in ("simulate", "fix"):
        proc = _cli(cmd, str(kernel), "--runner", dead_url, cwd=proj)
        assert proc.returncode == 2, proc.stdout + proc.stderr  # a usage error, before anything is sent
        assert "outside" in proc.stderr and "--task" in proc.stderr
    # named on the command line, it is the user's choice: the command goes on to the (dead) runner
    proc = _cli("simulate", str(kernel), "--task", str(elsewhere / "task.py"), "--runner", dead_url, cwd=proj)
    assert proc.returncode == 3, proc.stdout + proc.stderr
