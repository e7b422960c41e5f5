"""Classic ``mask=`` as an execution predicate that reaches the assignment destination.

The NKI docs ("NKI API Masking", SDK 2.26 ``nki.api.shared``) define ``mask=`` as a compile-time
execution predicate: the compiler skips the instruction or generates it with a smaller tile. In
``dst[...] = op(..., mask=m)`` (and ``dst[...] += op(..., mask=m)``) the instruction writes ``dst``
itself, so the elements outside ``m`` keep their previous values. Causal flash attention (the
nki-samples neuron-team kernels, autocomp's ``csa``/``mha`` problems) writes each score block twice
under complementary masks and relies on this.

The simulator computes a classic op into a fresh tile whose masked-off elements stay poisoned; the
tile remembers the predicate (``Storage.predicate``) until anything else writes it, and assignment /
accumulation into a destination honour it. Other consumers (``nl.store``, operands of later ops) are
separate instructions and still see the poison, as they would see stale data on hardware.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def set_predicate(tile: Any, mask: Any) -> None:
    """Record that ``tile`` (the ``view.View`` of a fresh, unviewed tile) holds the result of one instruction
    run under ``mask``."""
    if mask is None or tile.coords is not None or tile.steps:
        return
    m = np.asarray(mask, dtype=bool)
    if m.all():
        return
    tile.storage.predicate = np.ascontiguousarray(np.broadcast_to(m, tile.storage.shape))


def predicate_of(value: Any) -> np.ndarray | None:
    """The predicate, shaped like ``value`` (a ``view.View``; anything else has none), of the masked
    instruction that produced it, else None."""
    from .view import View

    pred = value.storage.predicate if isinstance(value, View) else None
    if pred is None:
        return None
    return np.asarray(value.shadow_get(pred), dtype=bool)
