"""Facts the compile-time checks of the simulator need about the kernel as a whole (issue 22).

``returns_outputs``: whether the kernel's own code returns a value. Classic front ends from SDK 2.21 on make
every kernel parameter immutable and kernels return their outputs; the older convention (SDK <= 2.20, and the
simulation-mode API examples written for it) passes outputs in as parameters and returns nothing. A store into
a parameter is therefore an error (``err_cannot_update_immutable_parameter``) for a kernel that returns its
outputs and a warning for one that writes through output parameters (see docs/toolchain.md).
"""
from __future__ import annotations

import dis
import weakref
from types import CodeType
from typing import Any

import numpy as np


def returns_outputs(code: CodeType | None) -> bool:
    """True when some ``return`` of ``code`` (the kernel function's own body) returns a value other than None."""
    if code is None:
        return False
    prev: Any = None
    for ins in dis.get_instructions(code):
        if ins.opname == "RETURN_VALUE" and not (prev is not None and prev.opname == "LOAD_CONST"
                                                 and prev.argval is None):
            return True
        if ins.opname == "RETURN_CONST" and ins.argval is not None:  # Python 3.12+
            return True
        prev = ins
    return False


def program_returns_outputs(results: list[Any]) -> bool:
    """The executor's reading of the same fact: some SPMD instance of the traced program returned a value."""
    return any(r is not None for r in results)


# storages holding an ``nl.loop_reduce`` result: assigning one is the documented reduction across the loop
_REDUCED: "weakref.WeakSet[Any]" = weakref.WeakSet()


def mark_reduction(storage: Any) -> None:
    _REDUCED.add(storage)


def is_reduction(storage: Any) -> bool:
    return storage in _REDUCED


def proven_overlap(owners: np.ndarray, cur: np.ndarray) -> bool:
    """``err_unexpected_output_dependencies`` is proven (an error, not a warning) when this iteration writes
    exactly the elements one earlier iteration last wrote: the destination does not move with the loop
    variable. ``owners`` holds, per element, 1 + the iteration of the frame that last wrote it; ``cur`` is its
    region this write covers. Partial overlaps (sliding windows, two iterations sharing an edge) stay warnings."""
    if not cur.size:
        return False
    p = int(cur.flat[0])
    if p <= 0 or int(cur.min()) != p or int(cur.max()) != p:
        return False
    return int(np.count_nonzero(owners == p)) == cur.size
