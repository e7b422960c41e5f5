"""Classic PSUM tile wider than one 2 KiB bank (``sim_psum_bank_overflow``, programming model TC#2)."""

from __future__ import annotations

from ..finding import Finding
from ..interp import DTYPE_BYTES, Event

CODE = "sim_psum_bank_overflow"
KINDS = {"alloc"}
BANK_BYTES = 2048  # one PSUM bank per partition = 512 fp32


def check(event: Event, ctx: object) -> list[Finding]:
    f = event.facts
    if f["buffer"] != "psum" or not f["shape"] or getattr(ctx, "generation", "") != "classic":
        return []
    axis = f["par_axis"] or 0
    free = f["shape"][axis + 1:]
    size = DTYPE_BYTES.get(f["dtype"] or "")
    if size is None or not free or any(d is None for d in free):
        return []
    nbytes = size
    for d in free:
        nbytes *= d  # type: ignore[operator]
    if nbytes > BANK_BYTES:
        return [Finding(CODE, f"PSUM tile needs {nbytes} bytes per partition; a PSUM tile must fit one "
                        f"{BANK_BYTES}-byte bank (nl.tile_size.psum_fmax = 512 fp32)", event.node)]
    return []
