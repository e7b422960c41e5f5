"""Warm executors (``isolation/standby.py``): claimed once, matched on everything their start fixed, holding
nothing of a job before their claim, and giving the verdict, problems and figures a cold executor gives."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nki_agent.toolchain import api
from nki_agent.toolchain.isolation import sandbox, standby
from nki_agent.toolchain.judging import judge

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT / "tests" / "fixtures"
LOADED = 300.0  # a loaded 2-core machine

KERNELS = [EXAMPLES / "l1_add" / "kernel_new.py", EXAMPLES / "l2_matmul" / "kernel_classic.py",
           EXAMPLES / "l2_softmax" / "kernel_new.py", FIXTURES / "wrong_store_new.py"]


@pytest.fixture(autouse=True)
def _no_leftovers(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv(standby.ENV, "1")
    standby.stop_all()
    yield
    standby.stop_all()


def _task(kernel: Path) -> Path:
    return kernel.parent / "task.py" if (kernel.parent / "task.py").exists() else kernel


def _comparable(res: Any) -> dict[str, Any]:
    out = res.model_dump(mode="json", exclude={"seconds", "stderr"})
    for s in out.get("seeds", []):
        s.pop("kernel_seconds", None)
        s.pop("reference_seconds", None)
    return dict(out)


def _ready(job: sandbox.Job, timeout: float) -> sandbox.Worker:
    with standby._lock:
        return standby._ready[standby._key(job, timeout, sandbox.DEFAULT_MEMORY)]


def _job() -> sandbox.Job:
    from nki_agent.toolchain.cost.calibration import request_field

    return judge._executor_job(dict(request_field()), ())


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_warm_executor_gives_what_a_cold_one_gives(kernel: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    claimed: list[sandbox.Worker] = []
    real = standby.claim

    def spy(*a: Any, **k: Any) -> sandbox.Worker | None:
        w = real(*a, **k)
        if w is not None:
            claimed.append(w)
        return w

    monkeypatch.setattr(standby, "claim", spy)
    task = str(_task(kernel))
    monkeypatch.setenv(standby.ENV, "0")
    cold = api.verify(str(kernel), task, seeds=2, timeout=LOADED)
    sim_cold = api.simulate(str(kernel), task, timeout=LOADED)
    assert not claimed
    monkeypatch.setenv(standby.ENV, "1")
    api.verify(str(kernel), task, seeds=2, timeout=LOADED)  # leaves a warm executor behind
    warm = api.verify(str(kernel), task, seeds=2, timeout=LOADED)
    sim_warm = api.simulate(str(kernel), task, timeout=LOADED)
    assert len(claimed) == 2 and all(w.job.request.get("warm") is True for w in claimed)
    assert _comparable(warm) == _comparable(cold)
    assert sim_warm.model_dump(mode="json", exclude={"seconds", "stderr"}) == \
        sim_cold.model_dump(mode="json", exclude={"seconds", "stderr"})


def test_a_warm_worker_holds_nothing_of_a_job_until_its_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[dict[str, Any]] = []
    real = sandbox.Worker.__init__

    def spy(self: sandbox.Worker, job: sandbox.Job, *a: Any, **k: Any) -> None:
        if job.request.get("warm"):
            started.append(dict(job.request, readable=job.readable, hidden=job.hidden))
        real(self, job, *a, **k)

    monkeypatch.setattr(sandbox.Worker, "__init__", spy)
    kernel = EXAMPLES / "l1_add" / "kernel_new.py"
    api.verify(str(kernel), str(_task(kernel)), seeds=1, timeout=LOADED)
    assert len(started) == 1
    text = repr(started[0])
    assert "kernel" not in started[0] and "task" not in started[0] and "source" not in started[0]
    assert str(kernel.parent) not in text and started[0]["readable"] == () and started[0]["hidden"] == ()


def test_a_claim_starts_the_jobs_deadline_and_matches_only_the_same_settings() -> None:
    job = _job()
    standby.prepare(job, 40.0)
    assert standby.claim(job, 41.0) is None  # another timeout: other rlimits, another time limit
    assert standby.claim(sandbox.Job(dict(job.request, cost_constants={"x": {"y": 1.0}}), imports_only=True),
                         40.0) is None
    cancel = threading.Event()
    w = standby.claim(job, 40.0, cancel=cancel)
    assert w is not None and w.cancel is cancel and w.timeout == 40.0
    assert 0 < w.deadline - time.monotonic() <= 40.0  # not the idle time it waited with
    assert standby.claim(job, 40.0) is None  # claimed once
    cancel.set()  # the job's cancel now stops it
    for _ in w.stream():
        pass
    assert w.result().body["problem"]["code"] == "sim_cancelled"


def test_a_dead_or_stale_warm_worker_is_never_handed_out() -> None:
    job = _job()
    standby.prepare(job, 40.0)
    w = _ready(job, 40.0)
    w.kill()
    w.proc.wait()
    assert standby.claim(job, 40.0) is None
    kernel = EXAMPLES / "l1_add" / "kernel_new.py"
    assert api.verify(str(kernel), str(_task(kernel)), seeds=1, timeout=LOADED).correct  # a cold one instead
    standby.prepare(job, 40.0)
    w = _ready(job, 40.0)
    w.deadline = time.monotonic() - 1  # past its idle time
    assert standby.claim(job, 40.0) is None
    assert w.proc.poll() is not None  # stopped, its cgroup removed


def test_warm_workers_can_be_turned_off_and_are_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    job = _job()
    monkeypatch.setenv(standby.ENV, "0")
    standby.prepare(job, 40.0)
    assert not standby._ready
    monkeypatch.setenv(standby.ENV, "1")
    standby.prepare(job, 40.0)
    w = _ready(job, 40.0)
    standby.stop_all()
    assert w.proc.poll() is not None and not standby._ready


HOSTILE = ROOT / "tests" / "fixtures" / "hostile_corpus"
FORGERIES = ["trace_patch_restore.py", "trace_sim_internals.py", "numpy_subtract_is_add.py", "host_patched_isa.py",
             "trace_seed_bits.py"]


@pytest.mark.parametrize("name", FORGERIES)
def test_a_forging_kernel_through_a_warm_executor_is_never_correct(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hostile corpus's verdict forgeries (a - b for an a + b task), with the executor a warm one: the
    verdict and the problems are the cold path's."""
    kernel, task = str(HOSTILE / name), str(HOSTILE / "task.py")
    standby.prepare(_job(), LOADED)
    with standby._lock:
        assert len(standby._ready) == 1
    warm = api.verify(kernel, task, seeds=2, hidden_seeds=1, timeout=LOADED)
    with standby._lock:  # the one it claimed was replaced by a fresh one
        assert len(standby._ready) == 1
    assert not warm.correct
    standby.stop_all()
    monkeypatch.setenv(standby.ENV, "0")
    cold = api.verify(kernel, task, seeds=2, hidden_seeds=1, timeout=LOADED)
    assert [p.code for p in warm.problems] == [p.code for p in cold.problems]
    assert [s.correct for s in warm.seeds] == [s.correct for s in cold.seeds]


def test_a_spawn_that_fails_leaves_no_warm_worker_and_the_next_one_works(monkeypatch: pytest.MonkeyPatch) -> None:
    job = _job()
    real = sandbox.Worker.__init__

    def broken(self: sandbox.Worker, *a: Any, **k: Any) -> None:
        raise OSError("no more processes")

    monkeypatch.setattr(sandbox.Worker, "__init__", broken)
    standby.prepare(job, 40.0)  # returns: the spawning thread said it failed
    assert standby.claim(job, 40.0) is None
    monkeypatch.setattr(sandbox.Worker, "__init__", real)
    standby.prepare(job, 40.0)
    w = standby.claim(job, 40.0)
    assert w is not None  # the same thread spawned this one
    w.kill()
    w.result()
