"""The simulator's instruction trace (sim/trace.py): what every example kernel records, fusion, loop nests,
trace-only runs, and that simulations share no state."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from nki_agent.toolchain.sim import memory_model
from nki_agent.toolchain.sim.kernel import LaunchRecord
from nki_agent.toolchain.judging.simulate import simulate_files

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("l*_*/kernel_*.py"))


def _trace(kernel: Path, arithmetic: bool = True, seed: int = 0) -> LaunchRecord:
    recs: list[LaunchRecord] = []
    out = simulate_files(str(kernel), str(kernel.parent / "task.py"), seed=seed, estimate=True,
                         arithmetic=arithmetic, on_record=recs.append)
    assert out["ran"], out["problems"]
    assert recs and recs[-1].instruction_trace is not None
    return recs[-1]


@pytest.mark.parametrize("kernel", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_example_traces_its_instructions(kernel: Path) -> None:
    rec = _trace(kernel)
    tr = rec.instruction_trace
    assert tr is not None and tr.instrs and not tr.truncated
    n_lines = len(kernel.read_text().splitlines())
    apis = Counter(i.api for i in tr.instrs)
    for ins in tr.instrs:
        assert ins.reads or ins.writes, ins
        assert 0 < ins.line <= n_lines, ins  # issued from the kernel file
        for a in ins.reads + ins.writes:
            assert a.buffer in ("hbm", "sbuf", "psum")
            assert 0 <= a.lo < a.hi and a.nbytes > 0 and 0 < a.run <= a.nbytes
            assert all(isinstance(s, int) for s in a.shape)  # plain data, no arrays kept alive
        for lid, it in ins.loops:
            assert lid in tr.loops and 0 <= it < tr.loops[lid].trips
    # every kernel moves data in and out of HBM
    assert any(a.buffer == "hbm" for i in tr.instrs for a in i.reads)
    assert any(a.buffer == "hbm" for i in tr.instrs for a in i.writes)
    assert [i.index for i in tr.instrs] == list(range(len(tr.instrs)))
    assert tr.target == rec.target and tr.generation == rec.generation
    assert sum(apis.values()) == len(tr.instrs)


@pytest.mark.parametrize("kernel", [ROOT / "examples/l2_matmul/kernel_classic.py",
                                    ROOT / "examples/l2_matmul/kernel_new.py"], ids=["classic", "new"])
def test_matmul_trace_fuses_loads_and_accumulation(kernel: Path) -> None:
    tr = _trace(kernel).instruction_trace
    assert tr is not None
    mms = [i for i in tr.instrs if i.api.endswith("nc_matmul")]
    K, M, N = 1024, 512, 1024  # the task's sizes
    assert len(mms) == (K // 128) * (M // 128) * (N // 512)
    for mm in mms:
        assert [a.buffer for a in mm.reads[:2]] == ["sbuf", "sbuf"]  # (the new API also reads dst: it accumulates)
        assert [a.shape for a in mm.reads[:2]] == [(128, 128), (128, 512)]
        assert any(a.buffer == "psum" for a in mm.writes)
    loads = [i for i in tr.instrs if i.api in ("nl.load", "nisa.dma_copy") and i.reads[0].buffer == "hbm"]
    assert len(loads) == 2 * len(mms)
    assert {a.run for i in loads for a in i.reads} == {128 * 4, 512 * 4}  # fp32 rows of the tiles
    assert not any(i.api in ("assign", "accumulate") for i in tr.instrs)  # fused into their producers
    if "new" in kernel.name:  # Python ranges: unrolled by tracing, not NKI loops
        assert tr.loops == {}
        return
    loops = sorted(tr.loops.values(), key=lambda lp: lp.line)
    assert [lp.var for lp in loops] == ["m", "n", "k"] and {lp.kind for lp in loops} == {"affine"}
    assert [lp.trips for lp in loops] == [M // 128, N // 512, K // 128]
    assert loops[0].parent is None and loops[1].parent == loops[0].id and loops[2].parent == loops[1].id


def test_loop_kinds_are_recorded(tmp_path: Path) -> None:
    (tmp_path / "task.py").write_text(
        "import numpy as np\n"
        "def get_inputs():\n    return [np.ones((256, 64), np.float32)]\n"
        "def reference(x):\n    return x * 2\n")
    (tmp_path / "k.py").write_text(
        "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n"
        "@nki.jit\ndef k(x):\n"
        "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
        "    for i in nl.sequential_range(2):\n"
        "        for j in nl.affine_range(1):\n"
        "            t = nl.load(x[i * 128:(i + 1) * 128, :])\n"
        "            u = t * 2\n"
        "            nl.store(out[i * 128:(i + 1) * 128, :], value=u)\n"
        "    return out\n")
    recs: list[LaunchRecord] = []
    out = simulate_files(str(tmp_path / "k.py"), str(tmp_path / "task.py"), estimate=True, on_record=recs.append)
    assert out["ran"], out["problems"]
    tr = recs[-1].instruction_trace
    assert tr is not None
    kinds = {lp.var: lp.kind for lp in tr.loops.values()}
    assert kinds == {"i": "sequential", "j": "affine"}
    assert [i.api for i in tr.instrs] == ["nl.load", "op.multiply", "nl.store"] * 2
    assert [i.line for i in tr.instrs[:3]] == [9, 10, 11]
    assert [it for _, it in tr.instrs[3].loops] == [1, 0]


def test_trace_only_run_records_the_same_instructions() -> None:
    kernel = ROOT / "examples/l3_attention/kernel_classic.py"
    a = _trace(kernel).instruction_trace
    b = _trace(kernel, arithmetic=False).instruction_trace
    assert a is not None and b is not None and not b.arithmetic
    sig = [(i.api, i.line, i.loops, [(x.buffer, x.shape, x.nbytes) for x in i.reads + i.writes]) for i in a.instrs]
    assert sig == [(i.api, i.line, i.loops, [(x.buffer, x.shape, x.nbytes) for x in i.reads + i.writes])
                   for i in b.instrs]


def test_simulations_share_no_clock() -> None:
    assert not hasattr(memory_model, "CLOCK")
    kernel = ROOT / "examples/l2_softmax/kernel_classic.py"
    first, second = _trace(kernel), _trace(kernel)
    assert (first.peak_sbuf_bytes, first.instructions) == (second.peak_sbuf_bytes, second.instructions)
