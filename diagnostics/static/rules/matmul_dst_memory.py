"""A new-API ``nisa.nc_matmul(dst, ...)`` whose result tile is not in PSUM (``sim_matmul_psum_placement``):
TensorE writes matmul results into PSUM only. Reported only where the code writes it out: ``dst`` is a
view of an allocation with an explicit ``buffer=`` of SBUF or HBM. (A classic ``nc_matmul`` returns its
PSUM tile; assigning it into an SBUF tile is a copy, not this mistake.)"""

from __future__ import annotations

from ..finding import Finding
from ..interp import Event
from .matmul_operand_memory import explicit_buffer

CODE = "sim_matmul_psum_placement"
KINDS = {"call"}
WRONG = {"sbuf": "SBUF", "hbm": "HBM"}


def check(event: Event, ctx: object) -> list[Finding]:
    f = event.facts
    if f["ns"] != "nisa" or f["name"] != "nc_matmul" or getattr(ctx, "generation", "") != "new":
        return []
    dst = f["args"][0] if f["args"] else f["kwargs"].get("dst")
    buffer = explicit_buffer(dst)
    if buffer not in WRONG:
        return []
    label = getattr(dst, "name", "") or "dst"
    return [Finding(CODE, f"nisa.nc_matmul writes its result to PSUM, but dst `{label}` is allocated in "
                    f"{WRONG[buffer]} (buffer=); allocate it with buffer=nl.psum and copy it to SBUF "
                    "(nisa.tensor_copy) before storing it", event.node)]
