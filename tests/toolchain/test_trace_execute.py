"""Trace in the kernel's jail, execute outside it (``sim/record.py``, ``sim/program.py``, ``sim/replay.py``).

- the kernel's process never receives a seed's input bytes: every frame the parent sends the tracer
  carries shapes and dtypes only, while the executor gets the arrays;
- a traced program executed on real inputs gives what a direct simulation gives (verdict, problems,
  errors, store-log lines) on the examples and on broken kernels;
- a program that did not come from an honest trace (unknown API, unknown tensor, host values as
  outputs, over-deep arguments, a decompression bomb) is refused, never executed into "correct";
- the cost model failing never changes a verdict; a kernel file importing torch at module level verifies.
"""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nki_agent.toolchain import api
from nki_agent.toolchain.isolation import sandbox
from nki_agent.toolchain.protocol import program as prog
from nki_agent.toolchain.judging.verify import verify_files

ROOT = Path(__file__).resolve().parents[2]
LOADED = 300.0  # seconds a jailed verification may take: these runs must finish on a loaded 2-core machine
EXAMPLES = ROOT / "examples"
ADD = EXAMPLES / "l1_add"
FIDELITY = [EXAMPLES / n for n in ("l1_add/kernel_new.py", "l1_add/kernel_classic.py", "l1_axpy_spmd/kernel_classic.py",
                                   "l1_row_max_3d/kernel_new.py", "l2_layernorm_3d/kernel_classic.py",
                                   "l2_matmul/kernel_new.py", "l2_matmul_spmd_grid/kernel_new.py",
                                   "l2_softmax/kernel_classic.py", "l3_attention/kernel_new.py")]

WRONG_SUB = '''
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(a.shape[0] // 128):
        x = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[r * 128:(r + 1) * 128, :])
        nisa.dma_copy(dst=y, src=b[r * 128:(r + 1) * 128, :])
        nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.subtract)
        nisa.dma_copy(dst=out[r * 128:(r + 1) * 128, :], src=x)
    return out
'''

UNWRITTEN_ROWS = WRONG_SUB.replace("for r in nl.affine_range(a.shape[0] // 128):",
                                   "for r in nl.affine_range(a.shape[0] // 128 - 1):").replace(
    "op=nl.subtract", "op=nl.add")


@pytest.mark.parametrize("kernel", FIDELITY, ids=[f"{k.parent.name}/{k.stem}" for k in FIDELITY])
def test_a_traced_program_verifies_as_the_direct_simulation_does(kernel: Path) -> None:
    task = str(kernel.parent / "task.py")
    direct = verify_files(str(kernel), task, seeds=2)
    traced = api.verify(str(kernel), task, seeds=2, isolate=False)
    assert traced.correct is direct.correct is True, traced.problems
    assert traced.max_abs_error == pytest.approx(direct.max_abs_error, abs=0)
    assert sorted(p.code for p in traced.problems) == sorted(p.code for p in direct.problems)
    assert traced.peak_sbuf_bytes == direct.peak_sbuf_bytes and traced.peak_psum_bytes == direct.peak_psum_bytes
    assert traced.estimate is not None  # the cost model estimates the executed program


@pytest.mark.parametrize("source", [WRONG_SUB, UNWRITTEN_ROWS], ids=["subtracts", "never_writes_the_last_rows"])
def test_wrong_kernels_fail_the_same_way_traced(source: str, tmp_path: Path) -> None:
    (tmp_path / "task.py").write_text((ROOT / "tests/fixtures/hostile_corpus/task.py").read_text())
    (tmp_path / "k.py").write_text(source)
    direct = verify_files(str(tmp_path / "k.py"), str(tmp_path / "task.py"), seeds=1)
    traced = api.verify(str(tmp_path / "k.py"), str(tmp_path / "task.py"), seeds=1, isolate=False)
    assert traced.correct is direct.correct is False
    assert sorted(p.code for p in traced.problems) == sorted(p.code for p in direct.problems)
    assert traced.seeds[0].first_mismatch is not None
    assert traced.seeds[0].first_mismatch.index == direct.seeds[0].first_mismatch.index
    if source is WRONG_SUB:  # the store that wrote the first wrong element, named from the executor's store log
        store = next(i for i, t in enumerate(source.splitlines(), 1) if "dst=out[" in t)
        assert traced.seeds[0].first_mismatch.line == store


def test_a_trace_time_error_is_reported_at_the_users_line(tmp_path: Path) -> None:
    (tmp_path / "task.py").write_text((ROOT / "tests/fixtures/hostile_corpus/task.py").read_text())
    bad = WRONG_SUB.replace("x = nl.ndarray((128,", "x = nl.ndarray((256,")
    (tmp_path / "k.py").write_text(bad)
    line = next(i for i, t in enumerate(bad.splitlines(), 1) if "(256," in t)
    for res in (api.verify(str(tmp_path / "k.py"), str(tmp_path / "task.py"), seeds=1, isolate=False),
                api.verify(str(tmp_path / "k.py"), str(tmp_path / "task.py"), seeds=1, timeout=LOADED)):
        assert res.correct is False
        codes = {p.code: p for p in res.problems}
        assert "err_num_partition_exceed_arch_limit" in codes, res.problems
        assert codes["err_num_partition_exceed_arch_limit"].location.line == line


DEVICE_LOOP = WRONG_SUB.replace("op=nl.subtract", "op=nl.add").replace(
    "for r in nl.affine_range(a.shape[0] // 128):", "for r in nl.dynamic_range(a.shape[0] // 128):")


@pytest.mark.parametrize("source", [DEVICE_LOOP, DEVICE_LOOP.replace("nl.dynamic_range", "nl.fori_loop")],
                         ids=["dynamic_range", "fori_loop"])
def test_a_loop_counted_on_the_device_is_refused_at_its_line_not_traced_on_placeholders(source: str,
                                                                                        tmp_path: Path) -> None:
    # its trip count would be a value of the device: the tracer must not take a placeholder's zero for it
    (tmp_path / "task.py").write_text((ROOT / "tests/fixtures/hostile_corpus/task.py").read_text())
    (tmp_path / "k.py").write_text(source)
    line = next(i for i, t in enumerate(source.splitlines(), 1) if "for r in" in t)
    res = api.verify(str(tmp_path / "k.py"), str(tmp_path / "task.py"), seeds=1, timeout=LOADED)
    assert res.correct is False
    codes = {p.code: p for p in res.problems}
    assert "sim_unsupported_api" in codes, res.problems
    assert codes["sim_unsupported_api"].location.line == line


def test_the_kernels_process_never_receives_a_seeds_input_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, dict[str, Any], int]] = []
    original = sandbox.Worker.send

    def spy(self: sandbox.Worker, header: dict[str, Any], arrays: Any = ()) -> None:
        sent.append((str(self.job.request.get("op")), dict(header), sum(a is not None for a in arrays)))
        original(self, header, arrays)

    monkeypatch.setattr(sandbox.Worker, "send", spy)
    res = api.verify(str(ADD / "kernel_new.py"), str(ADD / "task.py"), seeds=2, hidden_seeds=1, timeout=LOADED)
    assert res.correct is True, res.problems
    to_tracer = [(h, n) for op, h, n in sent if op == "trace"]
    to_executor = [(h, n) for op, h, n in sent if op == "execute"]
    assert to_tracer and all(n == 0 for _, n in to_tracer)  # not one array: no values of any seed
    specs = [h for h, _ in to_tracer if h.get("kind") == "spec"]
    assert len(specs) == 1  # one trace serves every seed
    assert all(set(a) == {"shape", "dtype"} for a in specs[0]["spec"])
    assert not any("seed" in h for h, _ in to_tracer)
    assert sum(n for h, n in to_executor if h.get("kind") == "seed") == 3 * 2  # a and b, for each of the 3 seeds
    assert [h.get("kind") for h, _ in to_executor if h.get("kind") in ("program", "seed")][0] == "program"


def _program(tmp_path: Path) -> prog.Program:
    from nki_agent.toolchain.tasks import find_kernel, load_module, load_task
    from nki_agent.toolchain.judging.trace_roles import placeholders, spec_of, trace_kernel

    task = load_task(str(ADD / "task.py"))
    kernel = find_kernel(load_module(str(ADD / "kernel_new.py"), "nki_agent_kernel"), task.kernel_name)
    arrays = [np.ones((256, 512), np.float32), np.ones((256, 512), np.float32)]
    return trace_kernel(kernel, task, placeholders(spec_of(arrays)), 2, None, None)


def _forged(p: prog.Program, edit: Any) -> np.ndarray:
    data = p.to_json()
    edit(data)
    raw = json.dumps(data).encode()
    return np.frombuffer(zlib.compress(raw), dtype=np.uint8)


def _first_call(data: dict[str, Any]) -> list[Any]:
    return next(e for e in data["instances"][0][1] if e[0] == prog.CALL)


@pytest.mark.parametrize("attack", ["unknown_api", "host_function", "unknown_tensor", "numpy_output", "deep_argument",
                                    "result_mismatch", "wrong_grid"])
def test_a_forged_program_is_refused(attack: str, tmp_path: Path) -> None:
    from nki_agent.toolchain.facts.errors import NkiError
    from nki_agent.toolchain.sim.replay import ProgramKernel

    p = _program(tmp_path)

    def edit(data: dict[str, Any]) -> None:
        if attack == "unknown_api":
            data["fns"][0] = "os.system"
        elif attack == "host_function":
            data["fns"][0] = "nl._loop_reduce_destination"
        elif attack == "unknown_tensor":
            _first_call(data)[3] = [{"t": 999999}]
        elif attack == "numpy_output":
            data["instances"][0][2] = {"nd": prog.encode_array(np.zeros((256, 512), np.float32))}
        elif attack == "deep_argument":
            deep: Any = 1
            for _ in range(200):
                deep = {"tu": [deep]}
            _first_call(data)[3] = [deep]
        elif attack == "result_mismatch":
            call = next(e for e in data["instances"][0][1] if e[0] == prog.CALL and e[5])
            call[5] = {"tu": [call[5], call[5]]}
        elif attack == "wrong_grid":
            data["grid"] = [2]

    blob = _forged(p, edit)
    arrays = [np.random.rand(256, 512).astype(np.float32) for _ in range(2)]
    with pytest.raises((prog.ProgramError, NkiError)):
        ProgramKernel(prog.unpack(blob))(*arrays)


def test_a_compressed_program_cannot_expand_without_bound() -> None:
    bomb = np.frombuffer(zlib.compress(b"[" * (prog.MAX_PROGRAM_BYTES + 10), 9), dtype=np.uint8)
    with pytest.raises(prog.ProgramError, match="expands beyond"):
        prog.unpack(bomb)
    with pytest.raises(prog.ProgramError):
        prog.unpack(np.frombuffer(b"not zlib", dtype=np.uint8))


def test_index_arrays_travel_as_affine_grids_or_exact_bytes() -> None:
    grid = (np.arange(128)[:, None] * 512 + np.arange(512)[None, :] + 7).astype(np.int64)
    enc = prog.encode_array(grid)
    assert "af" in enc and np.array_equal(prog.decode_array(enc), grid)
    odd = np.array([[3, 1, 4, 1, 5, 9, 2, 6]], dtype=np.int32)
    enc = prog.encode_array(odd)
    assert "ar" in enc and np.array_equal(prog.decode_array(enc), odd) and prog.decode_array(enc).dtype == np.int32
    mask = (np.arange(128)[:, None] < 100) & (np.arange(64)[None, :] < 30)
    assert np.array_equal(prog.decode_array(prog.encode_array(mask)), mask)


def test_the_cost_model_failing_never_changes_the_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    import nki_agent.toolchain.cost as cost

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the cost model is broken for this test")

    monkeypatch.setattr(cost, "estimate_data", broken)
    res = api.verify(str(ADD / "kernel_new.py"), str(ADD / "task.py"), seeds=2, isolate=False)
    assert res.correct is True and res.estimate is None
    assert not res.problems


TORCH_KERNEL = '''
import torch
import torch_xla.core.xla_model as xm

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(a.shape[0] // 128):
        x = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[r * 128:(r + 1) * 128, :])
        nisa.dma_copy(dst=y, src=b[r * 128:(r + 1) * 128, :])
        nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.add)
        nisa.dma_copy(dst=out[r * 128:(r + 1) * 128, :], src=x)
    return out


if __name__ == "__main__":
    device = xm.xla_device()
    a = torch.rand((256, 512), dtype=torch.float32).to(device=device)
    print(add_kernel(a, a))
'''


def test_a_kernel_file_importing_torch_at_module_level_verifies(tmp_path: Path) -> None:
    (tmp_path / "task.py").write_text((ROOT / "tests/fixtures/hostile_corpus/task.py").read_text())
    (tmp_path / "k.py").write_text(TORCH_KERNEL)
    res = api.verify(str(tmp_path / "k.py"), str(tmp_path / "task.py"), seeds=2, timeout=LOADED)
    assert res.correct is True, res.problems
    assert res.estimate is not None and res.sandbox == "bwrap"


GATHER_BY_VALUE = '''
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def add_kernel(a, b):
    """a + b, plus a gather whose row index is a's first column as integers: in range on the visible seeds
    of the task below, out of range on a hidden one (its values decide where the gather fails)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(a.shape[0] // 128):
        x = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[r * 128:(r + 1) * 128, :])
        nisa.dma_copy(dst=y, src=b[r * 128:(r + 1) * 128, :])
        idx = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=idx, src=x[:, 0:1])
        probe = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=probe, src=x[idx, 0])
        nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.add)
        nisa.dma_copy(dst=out[r * 128:(r + 1) * 128, :], src=x)
    return out
'''

def test_an_error_on_a_hidden_seed_says_its_code_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Values of a hidden seed never reach the result through a value-dependent error's message or place."""
    from nki_agent.toolchain.judging import results

    (tmp_path / "k.py").write_text(GATHER_BY_VALUE)
    hidden = 1234567
    monkeypatch.setattr(results.secrets, "randbelow", lambda bound: hidden)
    task = tmp_path / "task.py"
    task.write_text(f'''
import random

import numpy as np


def get_inputs():
    on_the_hidden_seed = random.random() == random.Random({hidden}).random()  # every RNG is seeded per seed
    a = np.random.rand(256, 512).astype(np.float32)  # in [0, 1): row index 0 on the visible seeds
    b = np.random.rand(256, 512).astype(np.float32)
    if on_the_hidden_seed:
        a[:, 0] = 7000 + np.arange(256)  # far out of range: where the gather fails depends on these values
    return [a, b]


def reference(a, b):
    return a + b
''')
    res = api.verify(str(tmp_path / "k.py"), str(task), seeds=2, hidden_seeds=1, timeout=LOADED)
    assert res.correct is False
    assert [s.correct for s in res.seeds] == [True, True, False]
    text = res.model_dump_json()
    # the hidden values 7000..7255 as whole numbers (a timing such as 0.0107000... is not one of them)
    leaked = [n for n in re.findall(r"(?<![\d.])\d+(?![\d.])", text) if 7000 <= int(n) <= 7255]
    assert leaked == [], leaked
    errors = [p for p in res.problems if p.severity == "error"]
    assert errors and all("hidden seed" in p.message and p.location.line == 1 for p in errors), errors
    assert res.seeds[2].message == "a hidden seed fails: the kernel raised an error on it"

SHARED_CONSTANT = '''
import nki
import nki.language as nl


@nki.jit
def add_constant(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    k = nl.shared_constant(CONSTANT, dtype=nl.float32)
    for r in nl.affine_range(a.shape[0] // 128):
        ta = nl.load(a[r * 128:(r + 1) * 128, :])
        tb = nl.load(b[r * 128:(r + 1) * 128, :])
        tk = nl.load(k[0:128, :])
        nl.store(out[r * 128:(r + 1) * 128, :], nl.add(nl.add(ta, tb), tk))
    return out
'''


def _constant_case(tmp_path: Path, constant_expr: str) -> tuple[Path, Path]:
    np.save(tmp_path / "k.npy", np.full((128, 512), 0.5, np.float32))
    kernel = tmp_path / "kernel.py"
    kernel.write_text(f"import numpy as np\nCONSTANT = {constant_expr}\n" + SHARED_CONSTANT)
    task = tmp_path / "task.py"
    task.write_text('''
import numpy as np

KERNEL = "add_constant"


def get_inputs():
    return [np.random.rand(256, 512).astype(np.float32), np.random.rand(256, 512).astype(np.float32)]


def reference(a, b):
    return a + b + 0.5
''')
    return kernel, task


def test_a_shared_constant_read_from_a_file_travels_as_values(tmp_path: Path) -> None:
    """A ``.npy`` path is read where the kernel runs; the program carries the array, never the path."""
    from nki_agent.toolchain.judging.trace_roles import placeholders, spec_of, trace_kernel
    from nki_agent.toolchain.tasks import find_kernel, load_module, load_task

    kernel, task = _constant_case(tmp_path, repr(str(tmp_path / "k.npy")))
    res = api.verify(str(kernel), str(task), seeds=2, isolate=False)
    assert res.correct is True, res.problems
    t = load_task(str(task))
    fn = find_kernel(load_module(str(kernel), "nki_agent_kernel"), t.kernel_name)
    arrays = [np.ones((256, 512), np.float32), np.ones((256, 512), np.float32)]
    text = json.dumps(trace_kernel(fn, t, placeholders(spec_of(arrays)), 2, None, None).to_json())
    assert "k.npy" not in text


def test_a_program_that_names_a_file_is_refused(tmp_path: Path) -> None:
    """The executor never opens a file a program names (a forged program could name any file in its jail)."""
    from nki_agent.toolchain.facts.errors import NkiError
    from nki_agent.toolchain.judging.trace_roles import placeholders, spec_of, trace_kernel
    from nki_agent.toolchain.sim.replay import ProgramKernel
    from nki_agent.toolchain.tasks import find_kernel, load_module, load_task

    kernel, task = _constant_case(tmp_path, "np.full((128, 512), 0.5, np.float32)")
    t = load_task(str(task))
    fn = find_kernel(load_module(str(kernel), "nki_agent_kernel"), t.kernel_name)
    arrays = [np.random.rand(256, 512).astype(np.float32) for _ in range(2)]
    p = trace_kernel(fn, t, placeholders(spec_of(arrays)), 2, None, None)
    assert np.allclose(ProgramKernel(p)(*arrays), arrays[0] + arrays[1] + 0.5)  # the honest program runs

    def edit(data: dict[str, Any]) -> None:
        i = data["fns"].index("nl.shared_constant")
        call = next(e for e in data["instances"][0][1] if e[0] == prog.CALL and e[1] == i)
        call[3][0] = str(tmp_path / "k.npy")

    with pytest.raises(NkiError, match="names a file|named a file"):
        ProgramKernel(prog.unpack(_forged(p, edit)))(*arrays)


def test_a_simulation_runs_the_verdicts_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """``simulate`` with a task: inputs drawn without the reference, the kernel only traced, outputs and the
    estimate computed by the executor — the kernel's process never holds an input value or the cost model."""
    sent: list[tuple[str, dict[str, Any], int]] = []
    original = sandbox.Worker.send

    def spy(self: sandbox.Worker, header: dict[str, Any], arrays: Any = ()) -> None:
        sent.append((str(self.job.request.get("op")), dict(header), sum(a is not None for a in arrays)))
        original(self, header, arrays)

    monkeypatch.setattr(sandbox.Worker, "send", spy)
    res = api.simulate(str(ADD / "kernel_new.py"), str(ADD / "task.py"), seed=1, timeout=LOADED)
    assert res.ran and not [p for p in res.problems if p.severity == "error"], res.problems
    direct = api.simulate(str(ADD / "kernel_new.py"), str(ADD / "task.py"), seed=1, isolate=False)
    assert [o.model_dump() for o in res.outputs] == [o.model_dump() for o in direct.outputs]
    assert [i.model_dump() for i in res.inputs] == [i.model_dump() for i in direct.inputs]
    assert res.estimate is not None and direct.estimate is not None
    assert res.estimate.latency_us == pytest.approx(direct.estimate.latency_us)
    ops = {op for op, _, _ in sent}
    assert ops == {"reference", "trace", "execute"}  # no single kernel+task worker ("simulate")
    assert all(n == 0 for op, _, n in sent if op == "trace")


def test_numpy_submodules_a_kernel_or_its_helper_names_are_imported_before_the_tripwire() -> None:
    """The tracer imports numpy.testing / ma / fft / polynomial only where the kernel's sources (its file and the
    user modules it imports) name them; a helper that imports them at module level still verifies."""
    kernel = ROOT / "tests" / "fixtures" / "numpy_submodules" / "kernel.py"
    res = api.verify(str(kernel), str(kernel), seeds=1, timeout=LOADED)
    assert res.correct and not res.problems, res.problems


class _FakeWorker:
    """Just what ``judge._relay_traced`` uses of a worker: frames out, frames in."""

    def __init__(self, frames: list[Any]) -> None:
        self.frames, self.sent = frames, []
        self.result_pipe = type("Pipe", (), {"limit": 0})()

    def stream(self) -> Any:
        yield from self.frames

    def send(self, header: dict[str, Any], arrays: Any = ()) -> None:
        self.sent.append(header)

    def close_input(self) -> None:
        pass


def test_a_program_for_a_signature_nobody_asked_for_never_reaches_the_executor() -> None:
    """A tracer (kernel code) that emits programs under keys of its own choosing — more of them than the
    signatures it was sent, or ahead of the real one — gets only the asked ones forwarded."""
    from nki_agent.toolchain.judging import judge

    a = np.zeros((4, 8), np.float32)
    seed = {"kind": "seed", "seed": 0, "inputs": 1, "params": 0, "expected": 1, "reference_seconds": 0.0}
    ref = _FakeWorker([({"kind": "settings", "settings": {}}, []), (seed, [a, a]), ({"kind": "done"}, [])])
    asked = json.dumps([1, [{"shape": [4, 8], "dtype": "float32"}]])
    blob = np.zeros(4, np.uint8)
    import threading

    spec_sent = threading.Event()

    class Tracer(_FakeWorker):
        def stream(self) -> Any:
            yield ({"kind": "program", "key": asked}, [blob])  # before it was asked: dropped
            yield from (({"kind": "program", "key": f"forged-{k}"}, [blob]) for k in range(25))
            assert spec_sent.wait(60)
            yield from (({"kind": "program", "key": f"forged-{k}"}, [blob]) for k in range(25, 50))
            yield ({"kind": "program", "key": asked}, [blob])

        def send(self, header: dict[str, Any], arrays: Any = ()) -> None:
            super().send(header, arrays)
            if header.get("kind") == "spec":
                spec_sent.set()

    tracer = Tracer([])
    executor = _FakeWorker([])
    settings, plan = judge._relay_traced(ref, tracer, executor, [0])  # type: ignore[arg-type]
    assert settings == {} and len(plan) == 1
    programs = [h["key"] for h in executor.sent if h.get("kind") == "program"]
    assert programs == [asked]
    assert [h.get("key") for h in executor.sent if h.get("kind") == "seed"] == [asked]
