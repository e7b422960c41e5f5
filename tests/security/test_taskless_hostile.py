"""Hostile ``__main__`` drivers of task-less kernel files, saved in the real language server.

A kernel file with no task is simulated on save by running its own ``__main__`` driver (or a test of the
workspace that calls it) — user code, run in the same jail as every kernel (``toolchain/sandbox.py``).
Each driver of ``tests/fixtures/taskless/hostile/`` (and the test of ``pytest_attack/``) attacks (writes and deletes outside its job, fork-bombs, reads
``~/.ssh`` and credentials, never returns); afterwards (``Scene.findings``, as for the hostile corpus):
nothing outside the job changed, no process survived, no secret reached any output, nothing reached the
network — and the attack ended as one clear diagnostic (``# expect:``), the server kept answering while
it ran, and it still simulates an honest driver afterwards.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from security_helpers import ROOT, SERVER_SIM_TIMEOUT, TOOLS, LspServer, Scene, bwrap_works, dumps

HOSTILE = ROOT / "tests" / "fixtures" / "taskless" / "hostile"
GOOD = ROOT / "tests" / "fixtures" / "taskless" / "add_main.py"
DRIVERS = sorted(HOSTILE.glob("*.py"))
RUN_BOUND = SERVER_SIM_TIMEOUT + 60.0  # the module server's limit per run (conftest) and start-up slack

pytestmark = pytest.mark.skipif(not bwrap_works(), reason="unprivileged namespaces (bubblewrap) do not work here")


def _render(path: Path, scene: Scene, home: Path) -> str:
    text = path.read_text()
    for key, value in {**scene.values(), "HOME": str(home)}.items():
        text = text.replace("{{" + key + "}}", value)
    return text + f"\n# run token: {scene.token}\n"


def _save_and_wait(server: LspServer, path: Path, text: str) -> tuple[list[dict], list[str], float]:
    """Open and save ``path``; wait for the run's publish while checking the server answers meanwhile.
    Returns (the last diagnostics, the lens titles, the slowest answer to a hover during the run)."""
    uri = path.as_uri()
    before = len(server.published(uri))
    server.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                            "text": text}})
    server.wait_for(lambda: len(server.published(uri)) > before, 60.0)
    runs = server.call("nki/stats", {})["result"]["sim_runs"]
    server.notify("textDocument/didSave", {"textDocument": {"uri": uri}})
    deadline, slowest = time.monotonic() + RUN_BOUND, 0.0
    while server.call("nki/stats", {})["result"]["sim_runs"] == runs:
        t0 = time.monotonic()
        server.call("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 12, "character": 8}},
                    bound=10.0)
        slowest = max(slowest, time.monotonic() - t0)
        assert time.monotonic() < deadline, "the task-less run did not finish"
        time.sleep(0.5)
    diags = server.published(uri)[-1]["diagnostics"]
    lenses = server.call("textDocument/codeLens", {"textDocument": {"uri": uri}})["result"] or []
    server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    return diags, [str((lens.get("command") or {}).get("title", "")) for lens in lenses], slowest


@pytest.mark.slow
@pytest.mark.parametrize("driver", DRIVERS, ids=[p.stem for p in DRIVERS])
def test_a_hostile_driver_is_contained_and_reported(driver: Path, server_scene: Scene, server_world) -> None:
    scene = server_scene
    (scene.user / "task.py").unlink()  # a kernel file with no task: its driver is what runs
    home = server_world.home
    (home / ".ssh").mkdir(exist_ok=True)
    (home / ".ssh" / "id_rsa").write_text(f"-----BEGIN KEY-----\n{scene.canary}\n")
    expect = re.search(r"^# expect: (\S+)$", driver.read_text(), re.MULTILINE)
    assert expect is not None
    server = server_world.server
    server.ensure()
    path = scene.user / driver.name
    path.write_text(_render(driver, scene, home))
    scene.begin()
    diags, titles, slowest = _save_and_wait(server, path, path.read_text())
    scene.processes_after(TOOLS | {server.pid})
    outputs = {"diagnostics": dumps(diags), "code lens": dumps(titles)}
    bad = scene.findings(outputs)
    assert not bad, "\n".join(bad)
    codes = [d.get("code") for d in diags if d.get("source") == "nki-sim"]
    assert expect.group(1) in codes, dumps(diags)
    [d] = [d for d in diags if d.get("code") == expect.group(1)]
    assert d["severity"] == 1 and len(d["message"]) < 2000
    assert any(f"✗ {expect.group(1)}" in t for t in titles), titles
    assert slowest < 5.0, f"a hover took {slowest:.1f} s while the driver ran"
    assert server.alive()
    # the server still runs an honest driver
    good = scene.user / "honest_main.py"
    shutil.copy(GOOD, good)
    diags, titles, _ = _save_and_wait(server, good, good.read_text())
    assert any("✓ simulated via __main__" in t for t in titles), (titles, diags)


@pytest.mark.slow
def test_a_hostile_workspace_test_is_contained_and_reported(server_scene: Scene, server_world) -> None:
    scene = server_scene
    (scene.user / "task.py").unlink()
    home = server_world.home
    attack = HOSTILE / "pytest_attack"
    kernel = scene.user / "victim_lib.py"
    shutil.copy(attack / "victim_lib.py", kernel)
    (scene.user / "test_victim_lib.py").write_text(_render(attack / "victim_lib_test_source.py", scene, home))
    server = server_world.server
    server.ensure()
    scene.begin()
    diags, titles, slowest = _save_and_wait(server, kernel, kernel.read_text())
    scene.processes_after(TOOLS | {server.pid})
    bad = scene.findings({"diagnostics": dumps(diags), "code lens": dumps(titles)})
    assert not bad, "\n".join(bad)
    [d] = [d for d in diags if d.get("code") == "sim_python_exception" and d.get("source") == "nki-sim"]
    assert "PermissionError" in d["message"] and "test_victim_lib.py" in d["message"], d["message"]
    assert any("✗ sim_python_exception — simulated via test_victim_lib.py::test_copy" in t for t in titles), titles
    assert slowest < 5.0 and server.alive()
