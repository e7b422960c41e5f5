"""The neuron backend against the fake Neuron SDK and device of tests/fixtures/fake_neuron (README there).

Every job runs in the OS jail with the fake device files bound at /dev/neuronN; outputs are computed
by the simulator as the device would, latencies are the recorded trn1 figures the fake replays.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from neuron_helpers import FAKE, example_kernel, fake_device, prepared, small_add_task
from nki_agent.runner.backends import Slot
from nki_agent.runner.backends import neuron as neuron_backend
from nki_agent.runner.backends.neuron import NeuronBackend
from nki_agent.toolchain.isolation import jail
from nki_agent.toolchain.protocol.jobs import BaselineResult, Latency

pytestmark = pytest.mark.skipif(not jail.status().available, reason=f"no jail here: {jail.status().reason}")
NEURON_LS = str(FAKE / "bin" / "neuron-ls")
RECORDED_P50 = 544.0  # the default recorded figure (RMSNorm 4096x4096 fp32 on trn1, README)
CLASSIC, NEW = "kernel_classic.py", "kernel_new.py"


@pytest.fixture
def backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> NeuronBackend:
    fake_device(tmp_path, monkeypatch, devices=2)
    return NeuronBackend(neuron_ls=NEURON_LS)


def _run(b: NeuronBackend, tmp_path: Path, op: str, kernel: str, task: str | None = None, core: int = 1,
         name: str = "job", **request: object):  # type: ignore[no-untyped-def]
    job = prepared(tmp_path, op, kernel, small_add_task() if task is None else task, name=name, **request)
    slot = Slot(core, core_id=core, devices=(f"/dev/neuron{core // 2}",))
    return b.run(job, slot, threading.Event(), lambda message: None)


def test_info_reads_versions_generations_and_cores(backend: NeuronBackend, tmp_path: Path) -> None:
    info = backend.info()
    assert info.name == "neuron" and info.sdk_version == "neuronx-cc 2.21.0+fake" and info.nki_version == "0.6.0+fake"
    assert info.generations == ("classic", "new") and info.targets == ("trn1",) and info.latency == "measured"
    assert info.neuron_cores == 2 and info.extra["cores_source"] == "neuron-ls" and info.extra["nkipy"] == "0.1.0+fake"
    assert backend.slots(8) == [Slot(0, 0, ("/dev/neuron0",)), Slot(1, 1, ("/dev/neuron0",))]
    assert backend.slots(1) == [Slot(0, 0, ("/dev/neuron0",))]
    by_dev = NeuronBackend(neuron_ls=str(tmp_path / "no-neuron-ls"))  # no neuron-ls: 2 device files x 2 cores
    assert by_dev.info().neuron_cores == 4 and by_dev.info().extra["cores_source"] == "/dev"
    assert [s.devices for s in by_dev.slots(4)] == [("/dev/neuron0",), ("/dev/neuron0",), ("/dev/neuron1",),
                                                    ("/dev/neuron1",)]


@pytest.mark.parametrize("kernel", [CLASSIC, NEW])
def test_a_correct_kernel_verifies_on_the_device(backend: NeuronBackend, tmp_path: Path, kernel: str) -> None:
    res = _run(backend, tmp_path, "verify", example_kernel(kernel), seeds=2)
    assert res.op == "verify" and res.correct and res.stage == "correct", res.problems
    assert res.backend == "neuron" and res.sandbox == "bwrap" and res.target == "trn1"
    assert res.generation == ("classic" if kernel == CLASSIC else "new")
    assert [s.seed for s in res.seeds] == [0, 1, None] and res.seeds[-1].hidden  # one hidden seed
    assert "fake-nrt: NeuronCore 1 on /dev/neuron0" in res.stderr


WRONG = {CLASSIC: ("nl.add(a_tile, b_tile", "nl.subtract(a_tile, b_tile"), NEW: ("op=nl.add", "op=nl.subtract")}


@pytest.mark.parametrize("kernel", [CLASSIC, NEW])
def test_a_wrong_kernel_fails_on_the_device(backend: NeuronBackend, tmp_path: Path, kernel: str) -> None:
    text = example_kernel(kernel).replace(*WRONG[kernel])
    res = _run(backend, tmp_path, "verify", text)
    assert res.compiled and not res.correct and res.stage == "compiled"
    assert res.mismatches > 0 and not any(s.correct for s in res.seeds)


PINNING = '''import os, sys
print("SEEN", os.environ.get("NEURON_RT_VISIBLE_CORES"), sorted(n for n in os.listdir("/dev") if n.startswith("neuron")),
      file=sys.stderr)
'''


def test_each_job_sees_only_its_core_and_its_device(backend: NeuronBackend, tmp_path: Path) -> None:
    res = _run(backend, tmp_path, "verify", PINNING + example_kernel(NEW), core=3, seeds=1)
    assert res.correct, res.problems
    assert "SEEN 3 ['neuron1']" in res.stderr and "fake-nrt: NeuronCore 3 on /dev/neuron1" in res.stderr
    other = _run(backend, tmp_path, "verify", PINNING + example_kernel(CLASSIC), core=0, seeds=1, name="other")
    assert "SEEN 0 ['neuron0']" in other.stderr


CONSTANT_TASK = '''import numpy as np


def get_inputs():
    return [np.random.randn(128, 64).astype(np.float32)]


def reference(a):
    return np.full_like(a, 2.0)
'''

# writes the whole (input-independent) answer on its first launch only; afterwards a row, or nothing
LAZY = '''import nki
import nki.isa as nisa
import nki.language as nl

_launches = [0]


@nki.jit
def lazy_kernel(a):
    _launches[0] += 1
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    rows = a.shape[0] if _launches[0] == 1 else ROWS_LATER
    if rows:
        t = nl.ndarray((rows, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.memset(dst=t, value=2.0)
        nisa.dma_copy(dst=out[0:rows, :], src=t)
    return out
'''


@pytest.mark.parametrize("rows_later", [1, 0], ids=["writes_one_row", "writes_nothing"])
def test_outputs_are_poisoned_before_each_run(backend: NeuronBackend, tmp_path: Path, rows_later: int) -> None:
    """The fake device hands back the same HBM each launch: without poisoning, the second seed would show
    the first seed's (input-independent, right) answer where the kernel wrote nothing."""
    res = _run(backend, tmp_path, "verify", LAZY.replace("ROWS_LATER", str(rows_later)), CONSTANT_TASK, seeds=2)
    assert res.compiled and not res.correct
    first, second = res.seeds[0], res.seeds[1]
    assert first.correct and not second.correct
    assert second.mismatches == (127 if rows_later else 128) * 64 and "NaN" in second.message


def test_a_kernel_that_never_writes_its_output_fails(backend: NeuronBackend, tmp_path: Path) -> None:
    res = _run(backend, tmp_path, "verify", LAZY.replace("a.shape[0] if _launches[0] == 1 else ROWS_LATER", "0"),
               CONSTANT_TASK)
    assert not res.correct and [p.code for p in res.problems] == ["err_tensor_output_not_written_to"]


@pytest.mark.parametrize("kernel", [CLASSIC, NEW])
def test_profile_reports_the_recorded_device_latency_with_statistics(backend: NeuronBackend, tmp_path: Path,
                                                                     kernel: str) -> None:
    res = _run(backend, tmp_path, "profile", example_kernel(kernel), seeds=1, warmup=3, iterations=30)
    assert res.op == "profile" and res.correct and res.stage == "latency", res.problems
    lat = res.latency
    assert lat.kind == "measured" and lat.core_id == 1 and lat.target == "trn1" and lat.warmup == 3
    assert lat.source == ("nki.benchmark" if kernel == CLASSIC else "BaremetalExecutor")
    assert lat.p50_us == RECORDED_P50 and lat.min_us == 541.0 and lat.max_us == 546.0
    assert lat.mean_us is not None and lat.mean_us != lat.p50_us and lat.std_us and lat.std_us > 0
    assert lat.iterations == 10 and lat.spread is not None and lat.spread <= 0.01  # one window: under 1 % spread
    assert res.baseline is not None and res.baseline.label == "cpu" and res.baseline.latency.kind == "measured"
    assert res.speedup == pytest.approx(res.baseline.latency.p50_us / RECORDED_P50)  # type: ignore[operator]


FAKE_TIMING = {
    CLASSIC: "from neuronxcc.nki import NcLatency\nNcLatency.get_latency_percentile = lambda self, p: 0.5\n",
    NEW: "from nkipy.runtime import BenchmarkStats\n_init = BenchmarkStats.__init__\n"
         "BenchmarkStats.__init__ = lambda self, d: _init(self, [0.0005 for _ in d])\n",
}


@pytest.mark.parametrize("kernel", [CLASSIC, NEW])
def test_a_kernel_cannot_fake_its_latency(backend: NeuronBackend, tmp_path: Path, kernel: str) -> None:
    res = _run(backend, tmp_path, "profile", FAKE_TIMING[kernel] + example_kernel(kernel), seeds=1)
    assert res.latency.kind == "not measured" and res.latency.p50_us is None
    assert not res.correct and any(p.code == "sim_sandbox_violation" and "Neuron SDK" in p.message
                                   for p in res.problems), res.problems


def test_a_speedup_over_10x_is_flagged(backend: NeuronBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slow = BaselineResult(label="cpu", latency=Latency(kind="measured", source="cpu", p50_us=RECORDED_P50 * 12))
    monkeypatch.setattr(neuron_backend, "run_baseline", lambda job, slot, cancel: slow)
    res = _run(backend, tmp_path, "profile", example_kernel(CLASSIC), seeds=1)
    assert res.speedup == pytest.approx(12.0) and "speedup_over_10x" in res.flags
    slow.latency.p50_us = RECORDED_P50 * 3
    res = _run(backend, tmp_path, "profile", example_kernel(CLASSIC), seeds=1, name="modest")
    assert res.speedup == pytest.approx(3.0) and "speedup_over_10x" not in res.flags


def test_compile_and_simulate(backend: NeuronBackend, tmp_path: Path) -> None:
    ok = _run(backend, tmp_path, "compile", example_kernel(NEW))
    assert ok.op == "compile" and ok.compiled and ok.stage == "compiled" and ok.backend == "neuron"
    broken = _run(backend, tmp_path, "compile", example_kernel(NEW).replace("n_rows, n_cols = a.shape", "n_rows = a"),
                  name="broken")
    assert broken.op == "compile" and not broken.compiled and broken.problems
    sim = _run(backend, tmp_path, "simulate", example_kernel(NEW), name="sim")
    assert sim.op == "simulate" and sim.ran and sim.backend == "simulator"


def test_a_missing_sdk_is_a_clear_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_device(tmp_path, monkeypatch, sdk=False)
    b = NeuronBackend(neuron_ls=NEURON_LS)
    assert b.info().generations == () and b.info().latency == "not measured" and b.info().sdk_version is None
    for op in ("verify", "profile", "compile"):
        res = _run(b, tmp_path, op, example_kernel(CLASSIC), name=op)
        assert res.op == op and [p.code for p in res.problems] == ["runner_sdk_missing"]
        assert "neuronx-cc" in res.problems[0].message and not getattr(res, "correct", False)


def test_a_runner_without_neuron_cores_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_device(tmp_path, monkeypatch, devices=0)
    b = NeuronBackend(neuron_ls=str(tmp_path / "no-neuron-ls"))
    assert b.info().neuron_cores == 0 and b.slots(4) == [Slot(0)]
    job = prepared(tmp_path, "verify", example_kernel(NEW), small_add_task())
    res = b.run(job, Slot(0), threading.Event(), lambda message: None)
    assert [p.code for p in res.problems] == ["runner_device_unavailable"]


def test_without_nkipy_a_new_api_kernel_is_verified_but_not_timed(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "sdk-without-nkipy"
    shutil.copytree(FAKE / "site", site, ignore=shutil.ignore_patterns("nkipy*"))
    fake_device(tmp_path, monkeypatch)
    b = NeuronBackend(sdk_path=[str(site)], neuron_ls=NEURON_LS)
    assert b.info().extra["nkipy"] == ""
    res = _run(b, tmp_path, "profile", example_kernel(NEW), seeds=1)
    assert res.correct and res.stage == "correct" and res.latency.kind == "not measured" and res.baseline is None
    assert any(p.code == "runner_not_measured" and "nkipy is not installed" in p.message for p in res.problems)


def test_poison_fills_floats_with_nan_and_other_dtypes_with_ff_bytes() -> None:
    import ml_dtypes
    import numpy as np
    from nki_agent.toolchain.judging.device_role import poison

    f, b, i, u, flags = (np.ones((4, 3), np.float32), np.ones((2, 2), ml_dtypes.bfloat16), np.zeros(5, np.int32),
                         np.zeros(3, np.uint8), np.zeros(2, bool))
    strided = np.zeros((4, 4), np.int16)[:, ::2]
    poison([f, b, i, u, flags, strided, "not an array"])
    assert np.isnan(f).all() and np.isnan(b.astype(np.float32)).all()
    assert (i == -1).all() and (u == 0xFF).all() and (flags.view(np.uint8) == 0xFF).all() and (strided == -1).all()


def test_the_device_role_reports_a_missing_sdk_without_crashing(tmp_path: Path) -> None:
    from nki_agent.toolchain.judging.device_role import device_role

    kernel = tmp_path / "kernel.py"
    kernel.write_text(example_kernel(CLASSIC))
    frames: Iterator[tuple[dict[str, Any], list[Any]]] = iter([({"kind": "settings", "settings": {}}, []),
                                                               ({"kind": "end"}, [])])
    reply, _ = device_role({"kernel": str(kernel), "sdk_path": []}, lambda: next(frames), lambda h, a: None)
    assert [p["code"] for p in reply["result"]["problems"]] == ["runner_sdk_missing"]
    assert "neuronx-cc" in reply["result"]["problems"][0]["message"] and not reply["result"]["compiled"]
