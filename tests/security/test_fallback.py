"""Where namespaces are unavailable (``NKI_AGENT_BWRAP=/nonexistent``) runs fall back to a plain worker and say so.

A representative kernel of every category — one whose attack stays harmless on this machine without
a jail — runs through ``api.verify`` with the jail disabled: every result is labelled
``"unsandboxed"`` (nothing else is promised there: without the jail the attacks may work). ``simulate``
and ``nki-agent verify --json`` carry the label too, and ``nki-agent fix --apply`` refuses to apply a
result verified outside the jail unless ``--trust-local`` is given.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from security_helpers import Harness, Kernel, Scene, ToolGone, categories, corpus, dumps

KERNELS = corpus()
BY_NAME = {k.name: k for k in KERNELS}
NO_JAIL = {"NKI_AGENT_BWRAP": "/nonexistent"}
NKI_AGENT = Path(sys.executable).with_name("nki-agent")
CLI = [str(NKI_AGENT)] if NKI_AGENT.exists() else [sys.executable, "-m", "nki_agent"]

# per category, a kernel whose attack is harmless here even unjailed (it only touches this test's tmp_path,
# its own process group, the test's listeners, or reads): these run for real in the fallback
REPRESENTATIVES = {
    "dir_fd": "dirfd_read_expected", "guard_patch": "guard_subclasses", "verifier_patch": "verifier_compare",
    "numpy_patch": "numpy_isclose", "subinterpreter": "subinterp_steal", "frame_walk": "frames_getframe",
    "result_forgery": "forge_json_fds", "host_compute": "host_storage_write",
    "input_mutation": "mutation_flag_reset", "network": "net_udp", "secrets": "secret_env_print",
    "fs_write": "fs_user_folder", "process_escape": "proc_double_fork", "kill_parent": "kill_group",
    "process_memory": "mem_parent_proc", "resource_exhaustion": "res_threads_fds", "output_flood": "flood_stderr",
    "runaway": "run_deep_recursion", "task_leak": "leak_git_objects", "trace_forgery": "trace_patch_restore",
}
CASES = [BY_NAME[name] for name in REPRESENTATIVES.values()]


def test_every_category_has_a_fallback_representative() -> None:
    assert sorted(REPRESENTATIVES) == sorted(categories(KERNELS))
    assert all(BY_NAME[n].category == c for c, n in REPRESENTATIVES.items())


def _request(op: str, scene: Scene, kernel: Path, task: Path, timeout: float) -> dict[str, Any]:
    return {"op": op, "kernel": str(kernel), "task": str(task), "seeds": 1, "timeout": timeout,
            "env": {**scene.env(), **NO_JAIL}, "cwd": str(scene.cwd), "tmpdir": str(scene.tmp)}


def _call(tool: Harness, req: dict[str, Any], timeout: float) -> dict[str, Any]:
    try:
        answer = tool.call(req, bound=timeout * 3 + 60)
    except (ToolGone, TimeoutError) as e:
        pytest.fail(f"the tool did not answer: {e}")
    assert not (isinstance(answer, dict) and set(answer) == {"error"}), answer
    return answer  # type: ignore[no-any-return]


@pytest.mark.parametrize("kernel", CASES, ids=[f"{k.category}:{k.name}" for k in CASES])
def test_a_run_without_namespaces_is_labelled_unsandboxed(kernel: Kernel, scene: Scene, tool: Harness) -> None:
    path = scene.place(kernel)
    tool.ensure()
    scene.begin()
    res = _call(tool, _request("api_verify", scene, path, scene.task, kernel.timeout), kernel.timeout)
    assert res.get("sandbox") == "unsandboxed", dumps(res)[:1500]


def test_simulate_and_the_cli_label_unsandboxed_runs(scene: Scene, tool: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    path = scene.place(BY_NAME["net_udp"])
    tool.ensure()
    res = _call(tool, _request("simulate", scene, path, scene.task, 30.0), 30.0)
    assert res.get("sandbox") == "unsandboxed", dumps(res)[:1500]
    monkeypatch.setenv("NKI_AGENT_BWRAP", "/nonexistent")
    done = subprocess.run([*CLI, "verify", str(path), "--task", str(scene.task), "--json", "--seeds", "1"],
                          capture_output=True, text=True, timeout=180, cwd=str(scene.cwd), env=dict(os.environ),
                          start_new_session=True, check=False)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert _json_of(done.stdout).get("sandbox") == "unsandboxed", done.stdout[-2000:]


# ------------------------------------------------------------------------------------- fix --apply
FIXABLE_TASK = '''import numpy as np


def get_inputs():
    return [np.random.rand(128, 512).astype(np.float32)]


def reference(a):
    return a * ((a > 0.5) & (a < 0.9))
'''
FIXABLE_KERNEL = '''import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(a):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    hi = nl.greater(x, 0.5)
    lo = nl.less(x, 0.9)
    m = hi and lo
    nl.store(out, nl.multiply(x, m))
    return out
'''


def _json_of(stdout: str) -> dict[str, Any]:
    """The JSON object the CLI printed (a warning line may precede it)."""
    start = stdout.find("\n{") + 1 if not stdout.lstrip().startswith("{") else stdout.find("{")
    return json.loads(stdout[start:])  # type: ignore[no-any-return]


def _fix(tmp_path: Path, jail: bool, *extra: str) -> tuple[dict[str, Any], str, str]:
    folder = tmp_path / ("jail" if jail else "nojail") / "-".join(extra or ("plain",))
    folder.mkdir(parents=True)
    (folder / "task.py").write_text(FIXABLE_TASK)
    kernel = folder / "kernel.py"
    kernel.write_text(FIXABLE_KERNEL)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "NKI_AGENT_BWRAP"))}
    if not jail:
        env.update(NO_JAIL)
    done = subprocess.run([*CLI, "fix", str(kernel), "--task", str(folder / "task.py"), "--model", "rules", "--apply",
                           "--json", "--no-trajectory", *extra], capture_output=True, text=True, timeout=600,
                          cwd=str(folder), env=env, start_new_session=True, check=False)
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
    return _json_of(done.stdout), kernel.read_text(), done.stdout + done.stderr


def test_fix_apply_refuses_an_unsandboxed_result_unless_trust_local(tmp_path: Path) -> None:
    out, text, log = _fix(tmp_path, jail=False)
    assert out["verdict"] == "verified", log[-2000:]  # the rules backend did fix it...
    assert out["applied"] is False and text == FIXABLE_KERNEL, log[-2000:]  # ...but outside the jail
    assert out.get("refused") is True, log[-2000:]
    assert "--trust-local" in log
    out, text, log = _fix(tmp_path, False, "--trust-local")
    assert out["applied"] is True and "m = hi & lo" in text, log[-2000:]


def test_fix_apply_applies_a_jailed_result_without_trust_local(tmp_path: Path) -> None:
    from security_helpers import jail_works

    if not jail_works():
        pytest.skip("this machine's jail does not work (jail.status())")
    out, text, log = _fix(tmp_path, jail=True)
    assert out["applied"] is True and "m = hi & lo" in text, log[-2000:]
    assert out.get("sandbox") in (None, "bwrap"), log[-2000:]

