"""Issue 24: an access is priced by what it is, not by how it is written, and spill only where the
allocator would spill.

* One copy written with slices, ``nl.ds``, ``nl.arange``, a full ``nl.mgrid`` grid or ``.ap()`` gets
  one estimate (a full mgrid grid used to fail the tracer's contiguity test: one-element runs, priced
  as a transposing DMA, 3.7x slower).
* A tensor with block axes in front of its ``par_dim`` is costed by its partition axis (it used to be
  costed with the block count as partitions and a 32x longer free axis).
* A whole-problem SBUF buffer indexed by the loop variable is live one tile at a time: no spill time,
  a "may spill" note; tiles written in one loop and all read in a later one still spill.

The kernels are small fixtures of our own, traced without arithmetic (``arithmetic=False``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from nki_agent.toolchain.cost import estimate
from nki_agent.toolchain.cost.deps import tile_live_peak
from nki_agent.toolchain.cost.hardware import hardware_for
from nki_agent.toolchain.judging.simulate import simulate_files

HEADER = "import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n"


def _task(shape: tuple[int, int]) -> str:
    return ("import numpy as np\nTARGET = 'trn1'\n\n"
            f"def get_inputs():\n    return [np.zeros({shape!r}, dtype=np.float32)]\n\n"
            "def reference(x):\n    return x\n")


def _run(tmp_path: Path, name: str, body: str, shape: tuple[int, int]) -> dict[str, Any]:
    """Trace ``body`` (a kernel ``k(x)``) on a zero input of ``shape``: the estimate, the trace, the sim's peak."""
    kernel = tmp_path / f"{name}.py"
    kernel.write_text(HEADER + body)
    task = tmp_path / f"task_{name}.py"
    task.write_text(_task(shape))
    records: list[Any] = []
    out = simulate_files(str(kernel), str(task), target="trn1", kernel_name="k", estimate=True, arithmetic=False,
                         on_record=records.append)
    assert out["ran"] and out.get("estimate") is not None, out.get("problems")
    rec = records[-1]
    return {"estimate": out["estimate"], "trace": rec.instruction_trace, "peak": rec.peak_sbuf_bytes}


# -- one copy, five spellings ---------------------------------------------------------------------------
COPY = """@nki.jit
def k(x):
    m, n = x.shape
    P = 128
    out = nl.ndarray((m, n), dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.mgrid[0:P, 0:n]
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(n)[None, :]
    for i in nl.affine_range(m // P):
        t = nl.load({src})
        nl.store({dst}, value=t)
    return out
"""
COPY_FORMS = {
    "slices": "{t}[i * P:(i + 1) * P, 0:n]",
    "ds": "{t}[nl.ds(i * P, P), nl.ds(0, n)]",
    "arange": "{t}[i * P + i_p, i_f]",
    "mgrid": "{t}[i * P + g.p, g.x]",
    "mgrid_unpacked": "{t}[i * P + g[0], g[1]]",
    "ap": "{t}.ap([[n, P], [1, n]], offset=i * P * n)",
}
COPY_SHAPE = (1024, 2048)


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("copies")
    return {form: _run(tmp, f"copy_{form}", COPY.format(src=f.format(t="x"), dst=f.format(t="out")), COPY_SHAPE)
            for form, f in COPY_FORMS.items()}


@pytest.mark.parametrize("form", [f for f in COPY_FORMS if f != "slices"])
def test_copy_costs_the_same_however_the_access_is_written(copies: dict[str, dict[str, Any]], form: str) -> None:
    ref, got = copies["slices"], copies[form]
    assert got["estimate"]["latency_us"] == pytest.approx(ref["estimate"]["latency_us"], rel=1e-9)
    assert got["estimate"]["bound"] == ref["estimate"]["bound"] == "DMA"
    # the canonical access: same shape, partitions, contiguous run and byte range
    for a, b in zip(ref["trace"].instrs, got["trace"].instrs, strict=True):
        assert a.api == b.api
        for x, y in zip(a.reads + a.writes, b.reads + b.writes, strict=True):
            assert (x.buffer, x.shape, x.partitions, x.free_elements, x.run, x.hi - x.lo) == \
                   (y.buffer, y.shape, y.partitions, y.free_elements, y.run, y.hi - y.lo)


def test_a_transposing_grid_is_still_a_transposing_dma(tmp_path: Path) -> None:
    """The canonical form keeps what the access is: ``out[i_f, i_p]`` walks HBM rows across partitions."""
    body = """@nki.jit
def k(x):
    n, _ = x.shape
    out = nl.ndarray((n, n), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:n, 0:n]
    t = nl.load(x[i_p, i_f])
    nl.store(out[i_f, i_p], value=t)
    return out
"""
    got = _run(tmp_path, "transpose", body, (128, 128))
    load, store = got["trace"].instrs
    assert load.reads[0].run == 128 * 128 * 4  # the whole tile is one run
    assert store.writes[0].run == 4  # one element per row: a transpose


# -- block axes in front of par_dim -------------------------------------------------------------------
ZEROS = """@nki.jit
def k(x):
    m, n = x.shape
    out = nl.ndarray((m, n), dtype=x.dtype, buffer=nl.shared_hbm)
    z = nl.zeros({shape}, dtype=nl.float32, buffer=nl.sbuf)
    g = nl.mgrid[0:128, 0:512]
    nl.store(out[0:128, 0:512], value={tile})
    return out
"""
ZEROS_FORMS = {  # 32 x 128 x 512 fp32 each: 128 partitions of 16384 elements
    "flat": ("(128, 32 * 512)", "z[:, 0:512]"),
    "one_block_axis": ("(32, nl.par_dim(128), 512)", "z[0]"),
    "two_block_axes": ("(4, 8, nl.par_dim(128), 512)", "z[0, 0]"),
    "block_axes_mgrid": ("(4, 8, nl.par_dim(128), 512)", "z[3, 7, g.p, g.x]"),
}


@pytest.mark.parametrize("form", [f for f in ZEROS_FORMS if f != "flat"])
def test_block_axes_before_par_dim_are_costed_by_the_partition_axis(tmp_path: Path, form: str) -> None:
    runs = {f: _run(tmp_path, f"zeros_{f}", ZEROS.format(shape=s, tile=t), (128, 512))
            for f, (s, t) in ZEROS_FORMS.items() if f in ("flat", form)}
    memset = next(i for i in runs[form]["trace"].instrs if i.api == "nl.zeros")
    w = memset.writes[0]
    assert (w.partitions, w.free_elements) == (128, 32 * 512)
    busy = {f: {e["lane"]: e["busy_us"] for e in r["estimate"]["engines"]} for f, r in runs.items()}
    engine = next(e for e, b in busy["flat"].items() if b > 0 and not e.startswith("DMA"))
    assert busy[form][engine] == pytest.approx(busy["flat"][engine], rel=1e-9)
    assert runs[form]["estimate"]["latency_us"] == pytest.approx(runs["flat"]["estimate"]["latency_us"], rel=1e-6)


# -- spill ------------------------------------------------------------------------------------------------
# 64 tiles x 128 x 1024 fp32 = 32 MiB per whole-problem buffer, over trn1's 24 MiB of SBUF
SPILL_SHAPE = (64 * 128, 1024)
PER_TILE = """@nki.jit
def k(x):
    n, f = x.shape
    P = 128
    out = nl.ndarray((n, f), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n // P):
        xt = nl.load(x[i * P:(i + 1) * P, :])
        yt = nl.exp(xt)
        nl.store(out[i * P:(i + 1) * P, :], value=yt)
    return out
"""
WHOLE_BUFFER = """@nki.jit
def k(x):
    n, f = x.shape
    P = 128
    out = nl.ndarray((n, f), dtype=x.dtype, buffer=nl.shared_hbm)
    xs = nl.ndarray((n // P, nl.par_dim(P), f), dtype=x.dtype, buffer=nl.sbuf)
    ys = nl.ndarray((n // P, nl.par_dim(P), f), dtype=x.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(n // P):
        xs[i] = nl.load(x[i * P:(i + 1) * P, :])
        ys[i] = nl.exp(xs[i])
        nl.store(out[i * P:(i + 1) * P, :], value=ys[i])
    return out
"""
TWO_LOOPS = """@nki.jit
def k(x):
    n, f = x.shape
    P = 128
    out = nl.ndarray((n, f), dtype=x.dtype, buffer=nl.shared_hbm)
    xs = nl.ndarray((n // P, nl.par_dim(P), f), dtype=x.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(n // P):
        xs[i] = nl.load(x[i * P:(i + 1) * P, :])
    for i in nl.affine_range(n // P):
        nl.store(out[i * P:(i + 1) * P, :], value=nl.exp(xs[i]))
    return out
"""


WHOLE_COLUMNS = """@nki.jit
def k(x):
    n, f = x.shape
    P = 128
    T = n // P
    out = nl.ndarray((n, f), dtype=x.dtype, buffer=nl.shared_hbm)
    xs = nl.ndarray((P, T * f), dtype=x.dtype, buffer=nl.sbuf)
    ys = nl.ndarray((P, T * f), dtype=x.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(T):
        xs[:, i * f:(i + 1) * f] = nl.load(x[i * P:(i + 1) * P, :])
        ys[:, i * f:(i + 1) * f] = nl.exp(xs[:, i * f:(i + 1) * f])
        nl.store(out[i * P:(i + 1) * P, :], value=ys[:, i * f:(i + 1) * f])
    return out
"""
HALVES_TWO_LOOPS = """@nki.jit
def k(x):
    n, f = x.shape
    P = 128
    h = f // 2
    out = nl.ndarray((n, f), dtype=x.dtype, buffer=nl.shared_hbm)
    xs = nl.ndarray((n // P, nl.par_dim(P), f), dtype=x.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(n // P):
        xs[i] = nl.load(x[i * P:(i + 1) * P, :])
    for i in nl.affine_range(n // P):
        for j in nl.affine_range(2):
            nl.store(out[i * P:(i + 1) * P, j * h:(j + 1) * h], value=nl.exp(xs[i, :, j * h:(j + 1) * h]))
    return out
"""


@pytest.fixture(scope="module")
def spills(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("spill")
    return {name: _run(tmp, name, body, SPILL_SHAPE)
            for name, body in (("per_tile", PER_TILE), ("whole_buffer", WHOLE_BUFFER), ("two_loops", TWO_LOOPS),
                               ("halves_two_loops", HALVES_TWO_LOOPS))}


def test_loop_indexed_whole_problem_buffer_is_not_charged_spill(spills: dict[str, dict[str, Any]]) -> None:
    sbuf = hardware_for("trn1").sbuf_bytes
    whole, tile = spills["whole_buffer"], spills["per_tile"]
    assert whole["peak"] > sbuf  # the simulator's whole-storage liveness is over capacity ...
    assert tile_live_peak(whole["trace"].instrs) <= sbuf  # ... the tiles live at once are not
    est = whole["estimate"]
    assert any("may spill" in n for n in est["notes"])
    assert not any("over capacity" in n for n in est["notes"])
    assert est["latency_us"] == pytest.approx(tile["estimate"]["latency_us"], rel=0.05)


def test_column_blocks_of_a_partition_major_buffer_are_tiles(tmp_path: Path) -> None:
    """``xs[:, i*f:(i+1)*f]`` of a (128, T*f) buffer: each column block is a tile of its own."""
    shape = (32 * 128, 1024)  # two 16 MiB buffers
    whole = _run(tmp_path, "whole_columns", WHOLE_COLUMNS, shape)
    tile = _run(tmp_path, "per_tile_cols", PER_TILE, shape)
    assert whole["peak"] > hardware_for("trn1").sbuf_bytes >= tile_live_peak(whole["trace"].instrs)
    assert any("may spill" in n for n in whole["estimate"]["notes"])
    assert whole["estimate"]["latency_us"] == pytest.approx(tile["estimate"]["latency_us"], rel=0.05)


@pytest.mark.parametrize("name", ["two_loops", "halves_two_loops"])
def test_tiles_live_across_loops_still_spill(spills: dict[str, dict[str, Any]], name: str) -> None:
    """Written whole in one loop, read (whole or in halves) in a later one: all tiles live in between."""
    two = spills[name]
    sbuf = hardware_for("trn1").sbuf_bytes
    assert tile_live_peak(two["trace"].instrs) > sbuf
    assert any("SBUF over capacity" in n for n in two["estimate"]["notes"])
    assert two["estimate"]["latency_us"] > spills["per_tile"]["estimate"]["latency_us"]


def test_estimate_without_the_simulators_peak_charges_nothing(spills: dict[str, dict[str, Any]]) -> None:
    """The trace alone (peak 0: no simulator liveness) never charges spill."""
    est = estimate(spills["two_loops"]["trace"], "trn1")
    assert not any("spill" in n for n in est.notes)
