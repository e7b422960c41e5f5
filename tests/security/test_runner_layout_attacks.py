"""Attacks on the runner's job layout, its scheduler and its body parsing, against a real ``nki-agent
runner serve`` subprocess on 127.0.0.1 (one slot, two tokens, no cache):

- ``sibling-module shadowing``: the kernel ships ``helper.py`` under the name of the module its task
  imports, so that in one flat job folder the task would import the kernel's (``OFFSET = 0``) instead of
  its own (``OFFSET = 1``) and a wrong kernel would be judged correct (measured before: local false,
  runner true). Locally the verdict is false; on the runner the client refuses to send it and the runner
  refuses it (422 naming ``helper``) however it is sent — flat, as two bundles, or through an installed
  name (``numpy``). Neither ever says correct.
- ``one token starving another``: token A queues slow jobs that hold the only slot; token B's job starts
  as soon as A's running job ends, before A's next queued job (order of the runner's own start times).
- ``over-deep JSON``: bodies nested far beyond the recursion limit on ``/reward``, ``/reward/batch``,
  ``/v1/jobs`` and ``/v1/verify`` answer 400, store nothing, and the runner stays up.

Every address is 127.0.0.1; no API key is needed; waits are on the runner's event stream.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from nki_agent.runner.client import RemoteRunner
from nki_agent.toolchain.isolation import jail
from nki_agent.toolchain.isolation.runner import LocalRunner
from security_helpers import L1_ADD, SECRET_VARS, TASK, TOOLS
from security_runner import RunnerProcess, backend_started, follow, request, submit

JOB_BOUND = 240.0  # safety net per job (seconds); the held jobs end when cancelled

HOLD = '''import time

import nki
import nki.isa as nisa
import nki.language as nl


def _hold():
    """Hold the slot until cancelled (bounded: 120 s)."""
    for _ in range(240):
        time.sleep(0.5)


@nki.jit
def add_kernel(a, b):
    _hold()
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    return out
'''

SHADOW_TASK = '''"""a + b + OFFSET, OFFSET from the task's own helper module."""
import numpy as np
from helper import OFFSET


def get_inputs():
    a = np.random.randn(200, 64).astype(np.float32)
    b = np.random.randn(200, 64).astype(np.float32)
    return [a, b]


def reference(a, b):
    return a + b + OFFSET
'''


@dataclass
class World:
    runner: RunnerProcess
    a: str
    b: str


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    base = tmp_path_factory.mktemp("layout")
    a, b = "token-a-" + secrets.token_hex(12), "token-b-" + secrets.token_hex(12)
    (base / "tokens").write_text(b + "\n")
    env = {k: v for k, v in os.environ.items() if k not in SECRET_VARS}
    env.update(NKI_AGENT_RUNNER_TOKEN=a, HOME=str(base), TMPDIR=str(base))
    args = ["--tokens-file", str(base / "tokens"), "--workers", "1", "--no-cache"]
    if not jail.status().available:  # the product's own jail: where it does not work, refusals still hold
        args.append("--unsafe-no-sandbox")
    runner = RunnerProcess(base / "state", base / "runner.stderr", env, args, cwd=base)
    runner.start()
    TOOLS.add(runner.pid)
    try:
        yield World(runner, a, b)
    finally:
        runner.close()
        TOOLS.discard(runner.pid)


def _shadow_project(base: Path) -> tuple[Path, Path]:
    """kernel/ (the l1_add kernel, computing a + b, plus its helper with OFFSET = 0) and task/ (a + b + 1)."""
    (base / "kernel").mkdir(parents=True)
    (base / "task").mkdir()
    kernel = base / "kernel" / "kernel.py"
    kernel.write_text("import helper  # noqa: F401 - only here to be bundled with the kernel\n" + L1_ADD.read_text())
    (base / "kernel" / "helper.py").write_text("OFFSET = 0.0\n")
    task = base / "task" / "task.py"
    task.write_text(SHADOW_TASK)
    (base / "task" / "helper.py").write_text("OFFSET = 1.0\n")
    return kernel, task


def test_sibling_module_shadowing_is_refused_and_never_correct(world: World, tmp_path: Path) -> None:
    kernel, task = _shadow_project(tmp_path)
    local = LocalRunner().verify(str(kernel), str(task), seeds=1, timeout=120.0)
    assert local.correct is False and local.compiled, [p.message for p in local.problems]
    with RemoteRunner(world.runner.url, token=world.a) as client:
        remote = client.verify(str(kernel), str(task), seeds=1, timeout=120.0)
    assert remote.correct is False
    assert [p.code for p in remote.problems] == ["sim_bad_input"]
    assert "shadows the module 'helper' the task imports" in remote.problems[0].message
    kernel_text, task_text = kernel.read_text(), task.read_text()
    ours, theirs = {"name": "helper.py", "text": "OFFSET = 0.0\n"}, {"name": "helper.py", "text": "OFFSET = 1.0\n"}
    flat = dict(request("kernel.py", kernel_text, task_text, seeds=1, nonce="flat"), modules=[ours])
    both = dict(flat, nonce="both", task_modules=[theirs])
    installed = dict(request("kernel.py", "import numpy\n" + L1_ADD.read_text(), TASK.read_text(), seeds=1,
                             nonce="installed"), modules=[{"name": "numpy.py", "text": "X = 1\n"}])
    with world.runner.client(world.a) as http:
        for body, module in ((flat, "helper"), (both, "helper"), (installed, "numpy")):
            resp = http.post("/v1/jobs", json=body)
            assert resp.status_code == 422, resp.text
            assert f"'{module}'" in resp.json()["error"], resp.text
            assert world.runner.jobs_in_store(str(body["nonce"])) == 0


def _state(http: httpx.Client, job_id: str) -> dict[str, Any]:
    r = http.get(f"/v1/jobs/{job_id}")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_one_token_does_not_starve_another(world: World) -> None:
    task = TASK.read_text()
    with world.runner.client(world.a) as a, world.runner.client(world.b) as b:
        held = [submit(a, request("hold.py", HOLD + f"# job {i}\n", task, seeds=1, timeout=150.0, nonce=f"hold-{i}"))
                for i in range(4)]
        first, stream = follow(a, held[0]["id"], JOB_BOUND, backend_started)
        assert first is not None and first["state"] == "running", stream[-2000:]
        mine = submit(b, request("kernel.py", L1_ADD.read_text(), task, seeds=1, timeout=120.0, nonce="b"))
        try:
            assert a.delete(f"/v1/jobs/{held[0]['id']}").status_code == 200  # A's running job ends
            final, stream = follow(b, mine["id"], JOB_BOUND)
            assert final is not None and final["state"] == "done", stream[-2000:]
            assert final["result"]["correct"] is True, stream[-2000:]
            ended = _state(a, held[0]["id"])
            assert ended["state"] == "cancelled"
            assert final["started_at"] >= ended["finished_at"]  # the slot went from A's job to B's
            for h in held[1:]:  # ... before any of A's queued jobs: each starts later, or not yet
                later = _state(a, h["id"])
                assert later["started_at"] is None or later["started_at"] >= final["finished_at"], later
        finally:
            for h in held:
                a.delete(f"/v1/jobs/{h['id']}")


def _deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


@pytest.mark.parametrize("route,body", [
    ("/reward", _deep(100_000)),
    ("/reward", b'{"op": "verify", "input_specs": ' + _deep(5_000) + b"}"),
    ("/reward/batch", b'{"items": [' + _deep(100_000) + b"]}"),
    ("/reward/batch", b'{"items": ' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"}"),
    ("/v1/jobs", b'{"op": "verify", "kernel": ' + _deep(100_000) + b"}"),
    ("/v1/verify", b'{"op": "verify", "nonce": ' + _deep(100_000) + b"}"),
])
def test_over_deep_json_is_400_and_the_runner_stays_up(world: World, route: str, body: bytes) -> None:
    with world.runner.client(world.a) as http:
        before = http.get("/v1/capabilities").json()
        resp = http.post(route, content=body, headers={"content-type": "application/json"})
        assert resp.status_code == 400, resp.text[:500]
        assert resp.json()["error"]
        assert http.get("/healthz").status_code == 200
        assert http.get("/v1/capabilities").json() == before
    assert world.runner.alive()
