"""Classic ``mask=`` is an execution predicate: a masked instruction assigned into a destination writes
only the elements in its mask (docs/toolchain.md, "Masks are execution predicates")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from nki_agent.toolchain.tasks import load_module

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "masks" / "complementary_masks.py"


K = load_module(str(FIXTURE), "complementary_masks")  # executed with NKI bound to the simulator
RNG = np.random.default_rng(7)


def test_complementary_masks_keep_each_others_writes() -> None:
    a = RNG.standard_normal((256, 256)).astype(np.float32)
    got = np.asarray(K.lower_blocks(a))
    want = np.where(np.tril(np.ones((256, 256), bool)), a, K.FILL).astype(np.float32)
    assert np.array_equal(got, want)


def test_accumulation_under_a_false_mask_adds_nothing() -> None:
    x = RNG.standard_normal((2, 64, 32)).astype(np.float32)
    y = RNG.standard_normal((2, 64, 48)).astype(np.float32)
    got = np.asarray(K.skipped_matmul(x, y))
    assert np.allclose(got, x[0].T @ y[0], atol=1e-4)


def test_masked_load_leaves_the_rest_of_its_destination() -> None:
    a = RNG.standard_normal((128, 32)).astype(np.float32)
    got = np.asarray(K.masked_load_into_zeros(a))
    assert np.array_equal(got[:64], a[:64])
    assert np.array_equal(got[64:], np.zeros_like(a[64:]))


def test_masked_result_read_by_another_instruction_is_undefined_outside_the_mask() -> None:
    a = RNG.standard_normal((128, 32)).astype(np.float32)
    got = np.asarray(K.masked_result_stored(a))
    assert np.allclose(got[:64], np.exp(a[:64]), rtol=1e-6)
    assert np.isnan(got[64:]).all()  # poisoned: the store is a separate instruction


def test_rewriting_a_masked_result_drops_its_mask() -> None:
    a = RNG.standard_normal((128, 32)).astype(np.float32)
    got = np.asarray(K.rewritten_masked_result(a))
    assert np.allclose(got, 2 * a)
