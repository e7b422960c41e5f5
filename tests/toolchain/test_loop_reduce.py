"""``nl.loop_reduce``: the assigned destination is also the operator's left input (b = op(b, a))."""

from __future__ import annotations

import numpy as np

from nki_agent.toolchain.shim import installed

with installed():
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


@nki.jit
def running_max(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    b = nl.full((128, 64), -1e30, dtype=nl.float32)
    for i in nl.affine_range(4):
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        b = nl.loop_reduce(t, op=np.maximum, loop_indices=[i], dtype=nl.float32)
    nl.store(out, b)
    return out


@nki.jit
def running_sum_from_nothing(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        t = nl.load(a[i * 128:(i + 1) * 128, :])
        acc = nl.loop_reduce(t, op=np.add, loop_indices=[i])
    nl.store(out, acc)
    return out


def test_loop_reduce_accumulates_into_its_destination() -> None:
    a = np.random.RandomState(0).randn(512, 64).astype(np.float32)
    assert np.allclose(running_max(a), a.reshape(4, 128, 64).max(0))


def test_loop_reduce_starts_from_the_first_tile() -> None:
    a = np.random.RandomState(1).randn(256, 64).astype(np.float32)
    assert np.allclose(running_sum_from_nothing(a), a[:128] + a[128:], atol=1e-6)


@nki.jit(mode="simulation")
def write_into_param(a, b):
    nl.store(b, nl.exp(nl.load(a)))


def test_old_style_output_parameter_is_written_back() -> None:
    """SDK simulation-mode examples pass the output array in; the simulator writes it back (with a warning)."""
    a = np.random.RandomState(2).rand(128, 64).astype(np.float32)
    b = np.zeros_like(a)
    write_into_param(a, b)
    assert np.allclose(b, np.exp(a))
