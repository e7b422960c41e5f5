"""``nl.loop_reduce`` assigned to a subscript reduces into that slice (docs/toolchain.md, "loop_reduce")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from nki_agent.toolchain.tasks import load_module

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "loop_reduce" / "subscript_destination.py"


K = load_module(str(FIXTURE), "subscript_destination")  # executed with NKI bound to the simulator
RNG = np.random.default_rng(11)


def test_reduction_into_fresh_slices_starts_from_the_first_tile() -> None:
    a = RNG.standard_normal((2, 3, 128, 16)).astype(np.float32)
    got = np.asarray(K.row_sums_into_fresh_slices(a))
    assert np.allclose(got, a.sum(axis=1), atol=1e-5)


def test_reduction_into_a_written_slice_includes_its_value() -> None:
    a = RNG.uniform(-3.0, 3.0, (3, 128, 8)).astype(np.float32)
    got = np.asarray(K.max_into_initialised_slice(a))
    assert np.array_equal(got, np.maximum(a.max(axis=0), -2.0))
