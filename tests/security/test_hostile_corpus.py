"""Every hostile kernel of ``tests/fixtures/hostile_corpus/`` through every tool that runs kernel code.

One test per (kernel, mode): ``api_verify`` (``api.verify``), ``cli_verify`` (``nki-agent verify --json``),
``simulate`` (``api.simulate``), ``agent_verify`` (``ToolBox.verify``, the fix agent's check of a
candidate), ``server_save`` (the language server's on-save verification, one server for the whole
module) and ``runner`` (the kernel and task sent over HTTP to a real ``nki-agent runner serve``
subprocess on 127.0.0.1, one for the whole module, whose token is a canary in its environment). The kernel is placed in ``tmp_path/user/`` beside the task with its placeholders filled in,
the tool runs with canary secrets in its environment, and afterwards (``Scene.findings``):

- a ``# correct: no`` kernel was not reported correct / verified;
- the run was jailed (``sandbox == "bwrap"``);
- nothing outside the job changed (``tmp_path`` snapshot, the tools' TMPDIR empty again, no token-named
  file in /tmp, /var/tmp, /dev/shm, the real home or site-packages, no job dir of the run left in /tmp);
- no process the run started is still alive (descendants of this test process — a subreaper — and any
  process with the test's token in its command line);
- no canary appears in any output the tool produced, and no output is larger than ``OUTPUT_CAP``;
- the 127.0.0.1 listeners (TCP and UDP on one port, unix socket by path and abstract name) received nothing;
- the tool is still alive and answers (after a disruptive kernel, it still verifies l1_add; the runner,
  after every kernel: ``/healthz`` answers and a second client, with its own token, gets l1_add verified
  in a jail; the runner's TMPDIR and job folders are empty again).

``NKI_AGENT_FULL_SECURITY=1`` runs every kernel through the server and the runner too (default: one per
category).
"""

from __future__ import annotations

import ast
import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from security_helpers import (
    DISRUPTIVE,
    L1_ADD,
    OUTPUT_CAP,
    PLACEHOLDERS,
    RUN_TIMEOUT,
    SERVER_SIM_TIMEOUT,
    TASK,
    TOOLS,
    Harness,
    Kernel,
    LspServer,
    RunRecord,
    Scene,
    ToolGone,
    _state,
    categories,
    corpus,
    dumps,
    end_process_group,
    jail_reason,
    jail_works,
)
from security_runner import RunnerGone, RunnerWorld, follow, request, submit

KERNELS = corpus()
BY_NAME = {k.name: k for k in KERNELS}
MODES = ("api_verify", "cli_verify", "simulate", "agent_verify")
SEEDS = 2
NKI_AGENT = Path(sys.executable).with_name("nki-agent")
CLI = [str(NKI_AGENT)] if NKI_AGENT.exists() else [sys.executable, "-m", "nki_agent"]
SERVER_RUN_BOUND = SERVER_SIM_TIMEOUT * 3 + 60  # the module server's limit per run (conftest), a few runs, slack

# the server runs one kernel per category by default: fast ones that still exercise the category's route
SERVER_REPRESENTATIVES = {
    "dir_fd": "dirfd_hardlink_expected", "guard_patch": "guard_subclasses", "verifier_patch": "verifier_compare",
    "numpy_patch": "numpy_isclose", "subinterpreter": "subinterp_escape", "frame_walk": "frames_getframe",
    "result_forgery": "forge_then_continue", "host_compute": "host_storage_write",
    "input_mutation": "mutation_host_write", "network": "net_tcp", "secrets": "secret_env_raise",
    "fs_write": "fs_user_folder", "process_escape": "proc_double_fork", "kill_parent": "kill_ppid",
    "process_memory": "mem_parent_proc", "resource_exhaustion": "res_disk_fill", "output_flood": "flood_stderr",
    "runaway": "run_deep_recursion", "task_leak": "leak_git_objects", "trace_forgery": "trace_patch_restore",
}


def server_selection(env: Any = os.environ) -> list[Kernel]:
    """The kernels the server and runner modes run: all with ``NKI_AGENT_FULL_SECURITY=1``, else one per category."""
    if env.get("NKI_AGENT_FULL_SECURITY", "") == "1":
        return list(KERNELS)
    chosen = set(SERVER_REPRESENTATIVES.values())
    return [k for k in KERNELS if k.name in chosen]


needs_jail = pytest.mark.skipif(not jail_works(), reason=f"this machine's jail does not work: {jail_reason()}")


# ---------------------------------------------------------------------------------------------- runners
def _api_request(op: str, scene: Scene, kernel_path: Path, task: Path, timeout: float) -> dict[str, Any]:
    return {"op": op, "kernel": str(kernel_path), "task": str(task), "seeds": SEEDS, "timeout": timeout,
            "env": scene.env(), "cwd": str(scene.cwd), "tmpdir": str(scene.tmp)}


def _harness_call(tool: Harness, req: dict[str, Any], rec: RunRecord, timeout: float) -> dict[str, Any] | None:
    try:
        answer = tool.call(req, bound=timeout * 3 + 60)
    except (ToolGone, TimeoutError) as e:
        rec.tool_trouble.append(f"the tool ({req['op']}) did not answer: {e}")
        return None
    if isinstance(answer, dict) and set(answer) == {"error"}:
        rec.tool_trouble.append(f"the tool ({req['op']}) raised instead of reporting a problem:\n{answer['error'][-1500:]}")
        return None
    return answer


def _problems(res: dict[str, Any]) -> list[str]:
    return [f"{p.get('code')}: {str(p.get('message'))[:160]}" for p in res.get("problems") or [] if isinstance(p, dict)]


def run_api(scene: Scene, kernel: Kernel, tool: Harness, op: str) -> RunRecord:
    rec = RunRecord()
    assert scene.kernel_path is not None
    res = _harness_call(tool, _api_request(op, scene, scene.kernel_path, scene.task, kernel.timeout), rec,
                        kernel.timeout)
    if res is None:
        return rec
    rec.outputs["result"] = dumps(res)
    rec.sandbox = res.get("sandbox")
    rec.problems = _problems(res)
    if op == "api_verify":
        rec.verdict = bool(res.get("correct"))
    return rec


def run_agent(scene: Scene, kernel: Kernel, tool: Harness) -> RunRecord:
    rec = RunRecord()
    assert scene.kernel_path is not None
    res = _harness_call(tool, _api_request("agent_verify", scene, scene.kernel_path, scene.task, kernel.timeout), rec,
                        kernel.timeout)
    if res is None:
        return rec
    rec.outputs["agent tool result"] = str(res.get("content", ""))
    rec.outputs["agent raw result"] = dumps(res.get("raw"))
    rec.outputs["agent diagnostics"] = dumps(res.get("diagnostics"))
    rec.verdict = bool(res.get("verified"))
    raw = res.get("raw") or {}
    rec.sandbox = raw.get("sandbox") if raw else "not run"  # refused before running (static checks): nothing ran
    rec.problems = _problems(raw) or [str(res.get("content", ""))[:300]]
    return rec


def _wait_cli(proc: subprocess.Popen[bytes], bound: float) -> str | None:
    """None once the CLI exited; else why it was ended (stopped by the kernel, or no end in sight)."""
    deadline = time.monotonic() + bound
    stopped_since: float | None = None
    while True:
        try:
            proc.wait(timeout=0.25)
            return None
        except subprocess.TimeoutExpired:
            pass
        if _state(proc.pid) == "T":
            stopped_since = stopped_since or time.monotonic()
            if time.monotonic() - stopped_since > 2.0:
                return "the CLI process was stopped (SIGSTOP) by the kernel"
        else:
            stopped_since = None
        if time.monotonic() > deadline:
            return f"the CLI did not finish within {bound:.0f} s"


def _read_capped(path: Path) -> str:
    with open(path, "rb") as f:
        return f.read(OUTPUT_CAP + 1).decode("utf-8", "replace")


def run_cli(scene: Scene, kernel_path: Path, task: Path, timeout: float) -> tuple[RunRecord, int | None]:
    rec = RunRecord()
    out, err = scene.io / "stdout", scene.io / "stderr"
    argv = [*CLI, "verify", str(kernel_path), "--task", str(task), "--json", "--seeds", str(SEEDS),
            "--timeout", str(timeout)]
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe, env=dict(os.environ),
                                cwd=str(scene.cwd), start_new_session=True)
    TOOLS.add(proc.pid)
    try:
        why = _wait_cli(proc, timeout * 3 + 60)
        if why is not None:
            rec.tool_trouble.append(why)
            end_process_group(proc)
    finally:
        TOOLS.discard(proc.pid)
    rec.outputs["cli stdout"] = _read_capped(out)
    rec.outputs["cli stderr"] = _read_capped(err)
    rc = proc.returncode
    if rc is not None and rc < 0:
        rec.tool_trouble.append(f"the CLI was killed by signal {-rc}")
    elif rc not in (0, 1):
        rec.tool_trouble.append(f"the CLI exited with status {rc} (0 correct / 1 not expected)")
    try:
        res = json.loads(rec.outputs["cli stdout"])
    except ValueError:
        rec.tool_trouble.append("the CLI printed no JSON result: " + rec.outputs["cli stderr"][-500:])
        return rec, rc
    rec.verdict = bool(res.get("correct"))
    rec.sandbox = res.get("sandbox")
    rec.problems = [f"{d.get('code')}: {str(d.get('message'))[:160]}" for d in res.get("diagnostics") or []]
    return rec, rc


def _server_run(server: LspServer, path: Path, text: str, bound: float, rec: RunRecord) -> None:
    """Open ``path`` with ``text``, save it, wait for the on-save verification's publish; fill ``rec``."""
    uri = path.as_uri()
    before = len(server.published(uri))
    notes = len(server.notifications)
    server.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                            "text": text}})
    server.wait_for(lambda: len(server.published(uri)) > before, 60.0)  # the static checks
    opened = len(server.published(uri))
    runs = server.call("nki/stats", {})["result"]["sim_runs"]
    server.notify("textDocument/didSave", {"textDocument": {"uri": uri}})
    server.wait_for(lambda: len(server.published(uri)) > opened, bound)  # the verification's publish
    stats = server.call("nki/stats", {})["result"]
    if stats["sim_runs"] != runs + 1:
        rec.tool_trouble.append(f"the server published without finishing its verification (stats {stats})")
    lenses = server.call("textDocument/codeLens", {"textDocument": {"uri": uri}})["result"] or []
    diags = server.published(uri)[-1]["diagnostics"]
    titles = [str((lens.get("command") or {}).get("title", "")) for lens in lenses]
    if titles:
        rec.verdict = any("✓ verified" in t for t in titles)
    else:  # no kernel the static facts can see (built at run time): no error from the verification = correct
        rec.verdict = not any(d.get("source") == "nki-verify" and d.get("severity") == 1 for d in diags)
    rec.sandbox = "unsandboxed" if any("UNSANDBOXED" in t for t in titles) else "bwrap"
    rec.problems = [f"{d.get('code')}: {str(d.get('message'))[:160]}" for d in diags if d.get("source") != "nki-check"]
    hover = server.call("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 2}},
                        bound=30.0)
    rec.outputs["server notifications"] = dumps(server.notifications[notes:])
    rec.outputs["server code lens"] = dumps(lenses)
    rec.outputs["server hover"] = dumps(hover)
    server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})


def run_server(scene: Scene, kernel: Kernel, server: LspServer, stderr: Path) -> RunRecord:
    rec = RunRecord()
    assert scene.kernel_path is not None
    offset = stderr.stat().st_size if stderr.exists() else 0
    try:
        _server_run(server, scene.kernel_path, scene.kernel_path.read_text(), SERVER_RUN_BOUND, rec)
    except (ToolGone, TimeoutError) as e:
        rec.tool_trouble.append(f"the language server did not answer: {e}")
    if stderr.exists():
        with open(stderr, "rb") as f:
            f.seek(offset)
            rec.outputs["server stderr"] = f.read(OUTPUT_CAP + 1).decode("utf-8", "replace")
    return rec


def run_runner(scene: Scene, kernel: Kernel, world: RunnerWorld) -> RunRecord:
    """The kernel and the task over HTTP to the runner, with the runner's own token; the job's event stream,
    its final status and what the runner printed meanwhile are the outputs checked."""
    rec = RunRecord()
    assert scene.kernel_path is not None
    offset = world.stderr.stat().st_size if world.stderr.exists() else 0
    printed = len(world.runner.stdout)
    body = request(scene.kernel_path.name, scene.kernel_path.read_text(), scene.task.read_text(), seeds=SEEDS,
                   timeout=kernel.timeout, nonce=scene.token)
    try:
        with world.runner.client(world.canary) as client:
            job = submit(client, body)
            final, stream = follow(client, job["id"], kernel.timeout * 3 + 60)
            rec.outputs["runner event stream"] = stream
            answer = client.get(f"/v1/jobs/{job['id']}")
            rec.outputs["runner job status"] = answer.text
            status = answer.json() if answer.status_code == 200 else final
    except (httpx.HTTPError, RuntimeError, TimeoutError, ValueError, RunnerGone) as e:
        rec.tool_trouble.append(f"the runner did not answer: {type(e).__name__}: {e}")
        status = None
    if world.stderr.exists():
        with open(world.stderr, "rb") as f:
            f.seek(offset)
            rec.outputs["runner stderr"] = f.read(OUTPUT_CAP + 1).decode("utf-8", "replace")
    rec.outputs["runner stdout"] = "".join(world.runner.stdout[printed:])
    if status is None:
        return rec
    res = status.get("result")
    if status.get("state") != "done" or not isinstance(res, dict):
        rec.tool_trouble.append(f"the runner ended the job {status.get('state')} without a result: {status.get('error')}")
        return rec
    if status.get("nonce") != scene.token:
        rec.tool_trouble.append(f"the job's status does not echo its nonce: {status.get('nonce')!r}")
    rec.verdict = bool(res.get("correct"))
    rec.sandbox = res.get("sandbox")
    rec.problems = _problems(res)
    return rec


def _liveness_runner(scene: Scene, world: RunnerWorld) -> list[str]:
    """After every kernel: the runner process is up, ``/healthz`` answers, and another client (its own token)
    still gets l1_add verified in a jail."""
    if not world.runner.alive():
        return ["the runner is dead or stopped after the run"]
    good = L1_ADD.read_text() + f"\n# benign client {secrets.token_hex(8)}\n"  # never answered from the cache
    try:
        with world.runner.client(world.other, timeout=RUN_TIMEOUT * 3 + 60) as client:
            health = client.get("/healthz", timeout=30.0)
            if health.status_code != 200 or not health.json().get("ok"):
                return [f"the runner's /healthz answered {health.status_code}: {health.text[:300]}"]
            done = client.post("/v1/verify", json=request("kernel.py", good, TASK.read_text(), seeds=1,
                                                          timeout=RUN_TIMEOUT))
    except (httpx.HTTPError, ValueError) as e:
        return [f"after the run the runner no longer answers another client: {type(e).__name__}: {e}"]
    res = done.json().get("result") if done.status_code == 200 else None
    if not isinstance(res, dict) or not res.get("correct") or res.get("sandbox") != "bwrap":
        why = f"{done.status_code} {done.text[:600]}"
        return [f"after the run the runner no longer verifies l1_add for another client in a jail: {why}"]
    return []


# ------------------------------------------------------------------------------------------ liveness
def _liveness_harness(scene: Scene, kernel: Kernel, tool: Harness, mode: str) -> list[str]:
    """The tool still answers; after a disruptive kernel it still runs a good kernel in a jail (api_verify:
    verifies l1_add; the other modes: simulates it, which costs one jail instead of two)."""
    if not tool.alive():
        return ["the tool process is dead or stopped after the run"]
    try:
        tool.call({"op": "ping"}, bound=30.0)
    except (ToolGone, TimeoutError) as e:
        return [f"the tool does not answer a ping after the run: {e}"]
    if kernel.category not in DISRUPTIVE:
        return []
    rec = RunRecord()
    op = "api_verify" if mode == "api_verify" else "simulate"
    res = _harness_call(tool, _api_request(op, scene, L1_ADD, TASK, RUN_TIMEOUT), rec, RUN_TIMEOUT)
    if res is None:
        return rec.tool_trouble
    good = res.get("correct") if op == "api_verify" else res.get("ran")
    if not good or res.get("sandbox") != "bwrap":
        return [f"after the run the tool no longer runs l1_add in a jail ({op}): {dumps(res)[:600]}"]
    return []


def _liveness_server(scene: Scene, kernel: Kernel, server: LspServer) -> list[str]:
    if not server.alive():
        return ["the language server is dead or stopped after the run"]
    try:
        server.call("nki/stats", {}, bound=30.0)
    except (ToolGone, TimeoutError) as e:
        return [f"the language server does not answer after the run: {e}"]
    if kernel.category not in DISRUPTIVE:
        return []
    rec = RunRecord()
    folder = scene.io / "good"  # outside the snapshot: a folder of the test's own with l1_add beside the task
    folder.mkdir(exist_ok=True)
    (folder / "task.py").write_text(TASK.read_text())
    good = folder / "kernel.py"
    good.write_text(L1_ADD.read_text())
    try:
        _server_run(server, good, good.read_text(), SERVER_RUN_BOUND, rec)
    except (ToolGone, TimeoutError) as e:
        return [f"after the run the language server no longer verifies l1_add: {e}"]
    return [] if rec.verdict else [f"after the run the language server no longer verifies l1_add: {rec.problems}"]


# ------------------------------------------------------------------------------------------- verdict
def judge(scene: Scene, kernel: Kernel, mode: str, rec: RunRecord, alive: list[str]) -> list[str]:
    bad = list(rec.tool_trouble)
    if kernel.correct == "no" and rec.verdict is True:
        bad.append("a hostile kernel was reported CORRECT")
    if rec.sandbox not in ("bwrap", "not run") and not rec.tool_trouble:
        bad.append(f"the run was not jailed (sandbox label {rec.sandbox!r}, expected 'bwrap')")
    bad += scene.findings(rec.outputs)
    bad += alive
    return bad


def _message(kernel: Kernel, mode: str, rec: RunRecord, bad: list[str]) -> str:
    lines = [f"{kernel.name} [{kernel.category}, correct: {kernel.correct}] via {mode}: {kernel.attack}",
             f"verdict={rec.verdict} sandbox={rec.sandbox} problems={rec.problems[:4]}"]
    return "\n".join(lines + [f"  - {b[:700]}" for b in bad])


# --------------------------------------------------------------------------------------------- tests
CASES = [(mode, k) for k in KERNELS for mode in MODES]


@needs_jail
@pytest.mark.parametrize(("mode", "kernel"), CASES, ids=[f"{m}:{k.name}" for m, k in CASES])
def test_hostile_kernel_is_contained(mode: str, kernel: Kernel, scene: Scene, tool: Harness) -> None:
    scene.place(kernel)
    tool.ensure()
    scene.begin()
    if mode == "cli_verify":
        rec, _ = run_cli(scene, scene.kernel_path, scene.task, kernel.timeout)  # type: ignore[arg-type]
    elif mode == "agent_verify":
        rec = run_agent(scene, kernel, tool)
    else:
        rec = run_api(scene, kernel, tool, mode)
    scene.processes_after(TOOLS)
    # a CLI run is its own process: exiting normally with a JSON answer is its "still alive"
    alive = [] if mode == "cli_verify" else _liveness_harness(scene, kernel, tool, mode)
    bad = judge(scene, kernel, mode, rec, alive)
    assert not bad, _message(kernel, mode, rec, bad)


SERVER_CASES = server_selection()


@needs_jail
@pytest.mark.parametrize("kernel", SERVER_CASES, ids=[f"server_save:{k.name}" for k in SERVER_CASES])
def test_hostile_kernel_is_contained_on_save(kernel: Kernel, server_scene: Scene, server_world: Any) -> None:
    server = server_world.server
    server_scene.place(kernel)
    server.ensure()
    server_scene.begin()
    rec = run_server(server_scene, kernel, server, server_world.stderr)
    server_scene.processes_after(TOOLS)
    alive = _liveness_server(server_scene, kernel, server)
    bad = judge(server_scene, kernel, "server_save", rec, alive)
    assert not bad, _message(kernel, "server_save", rec, bad)


RUNNER_CASES = server_selection()


@needs_jail
@pytest.mark.parametrize("kernel", RUNNER_CASES, ids=[f"runner:{k.name}" for k in RUNNER_CASES])
def test_hostile_kernel_is_contained_by_the_runner(kernel: Kernel, runner_scene: Scene,
                                                   runner_world: RunnerWorld) -> None:
    runner_scene.place(kernel)
    runner_world.ensure()
    runner_scene.begin()
    rec = run_runner(runner_scene, kernel, runner_world)
    runner_scene.processes_after(TOOLS)
    alive = _liveness_runner(runner_scene, runner_world)
    bad = judge(runner_scene, kernel, "runner", rec, alive)
    assert not bad, _message(kernel, "runner", rec, bad)


# ------------------------------------------------------------------------------------- the corpus itself
def test_the_corpus_is_large_and_varied() -> None:
    by_cat = categories(KERNELS)
    assert len(KERNELS) >= 44, len(KERNELS)
    assert len(by_cat) >= 14, sorted(by_cat)
    assert sum(k.classic for k in KERNELS) >= 3  # a few classic-API kernels
    assert {k.correct for k in KERNELS} == {"no", "any"}


@pytest.mark.parametrize("kernel", KERNELS, ids=[k.name for k in KERNELS])
def test_a_corpus_file_is_a_well_formed_hostile_kernel(kernel: Kernel) -> None:
    text = kernel.path.read_text()
    assert text.startswith("# category: "), "header lines first: # category / # attack / # correct"
    assert kernel.category and kernel.attack and kernel.correct in ("no", "any")
    used = set(re.findall(r"\{\{(\w+)\}\}", text))
    assert used <= set(PLACEHOLDERS), used - set(PLACEHOLDERS)
    filled = text
    for key in PLACEHOLDERS:
        filled = filled.replace("{{" + key + "}}", "12345" if key == "PORT" else "/nonexistent/x")
    ast.parse(filled)  # a complete module once the test fills the placeholders
    assert "nki.jit" in text
    assert ("import nki\n" in text and "import nki.language as nl" in text) or "import neuronxcc.nki as nki" in text
    # safety even without a sandbox: only the test's loopback listener, bounded loops, guarded broad kills
    for ip in re.findall(r"\b\d{1,3}(?:\.\d{1,3}){3}\b", text):
        assert ip == "127.0.0.1", ip
    assert "localhost" not in text and "::1" not in text
    assert all(u.startswith("http://127.0.0.1:") for u in re.findall(r"https?://\S+", text))
    assert "while True" not in text
    if "kill(-1" in text:
        assert "if os.getpid() < 10:" in text


def test_the_task_adds_two_float32_matrices() -> None:
    import runpy

    import numpy as np

    ns = runpy.run_path(str(TASK))  # not an import: nothing is cached beside the task
    a, b = ns["get_inputs"]()
    assert a.shape == b.shape == (256, 512) and a.dtype == b.dtype == np.float32
    assert np.array_equal(ns["reference"](a, b), a + b)


def test_the_server_selection_settings() -> None:
    """Default: one kernel per category, each a corpus file; ``NKI_AGENT_FULL_SECURITY=1``: the whole corpus."""
    assert server_selection({"NKI_AGENT_FULL_SECURITY": "1"}) == KERNELS
    subset = server_selection({})
    assert sorted(k.category for k in subset) == sorted(categories(KERNELS))
    assert all(SERVER_REPRESENTATIVES[k.category] == k.name for k in subset)
    assert set(SERVER_REPRESENTATIVES.values()) <= set(BY_NAME)
    assert server_selection({"NKI_AGENT_FULL_SECURITY": "0"}) == subset
