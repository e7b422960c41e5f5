"""The judge's per-output comparison (``verify.compare``) against ``np.isclose`` and masked maxima spelled out.

The fast path (every element finite) and the general one must give the same verdict, mismatch count, first
mismatch and error figures as the definition: ``|got - exp| <= atol + rtol * |exp|`` where both are finite,
equality where either is infinite, NaN equal to NaN; errors over the elements where both are finite."""

from __future__ import annotations

import numpy as np
import pytest

from nki_agent.toolchain.judging.verify import compare

RNG = np.random.default_rng(7)
BASE = RNG.standard_normal((256, 64)).astype(np.float32)


def _near(scale: float) -> np.ndarray:
    return (BASE + RNG.standard_normal(BASE.shape).astype(np.float32) * np.float32(scale)).astype(np.float32)


def _with(a: np.ndarray, where: tuple[int, int], value: float) -> np.ndarray:
    out = a.copy()
    out[where] = value
    return out


CASES = {
    "equal": (BASE, BASE.copy()),
    "within tolerance": (_near(1e-7), BASE),
    "a few outside": (_with(BASE, (3, 5), 2.0), BASE),
    "all wrong": (BASE + 1, BASE),
    "zeros expected": (np.full((4, 8), 1e-9, np.float32), np.zeros((4, 8), np.float32)),
    "NaN got (never written)": (_with(BASE, (130, 1), np.nan), BASE),
    "NaN both": (_with(BASE, (9, 9), np.nan), _with(BASE, (9, 9), np.nan)),
    "inf both": (_with(BASE, (0, 0), np.inf), _with(BASE, (0, 0), np.inf)),
    "inf expected, finite got": (BASE, _with(BASE, (2, 2), np.inf)),
    "opposite infinities": (_with(BASE, (1, 1), -np.inf), _with(BASE, (1, 1), np.inf)),
    "all NaN": (np.full((2, 3), np.nan, np.float32), np.zeros((2, 3), np.float32)),
    "empty": (np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32)),
    "bf16-like coarse": (np.round(BASE * 8) / 8, BASE),
}


def _definition(got: np.ndarray, exp: np.ndarray, atol: float, rtol: float) -> tuple[int, float, float, list[int]]:
    g, e = got.astype(np.float64), exp.astype(np.float64)
    ok = np.isclose(g, e, atol=atol, rtol=rtol, equal_nan=True)
    with np.errstate(all="ignore"):
        diff = np.abs(g - e)
        both = np.isfinite(g) & np.isfinite(e)
        abs_err = float(diff[both].max()) if both.any() else 0.0
        rel_err = float((diff / np.maximum(np.abs(e), 1e-12))[both].max()) if both.any() else 0.0
    if not both.all() and not np.array_equal(np.isnan(g), np.isnan(e)):
        abs_err = float("inf")
    first = [int(i) for i in np.argwhere(~ok)[0]] if (~ok).any() else []
    return int((~ok).sum()), abs_err, rel_err, first


@pytest.mark.parametrize("name", list(CASES))
def test_compare_matches_the_definition(name: str) -> None:
    got, exp = CASES[name]
    atol, rtol = 1e-5, 1e-4
    r = compare(got, exp, atol, rtol, 0)
    mismatches, abs_err, rel_err, first = _definition(got, exp, atol, rtol)
    assert r.mismatches == mismatches and r.correct == (mismatches == 0) and r.elements == got.size
    assert r.max_abs_error == pytest.approx(abs_err, rel=1e-12, abs=0) or r.max_abs_error == abs_err
    assert r.max_rel_error == pytest.approx(rel_err, rel=1e-12, abs=0)
    assert (r.first_mismatch.index if r.first_mismatch else []) == first
