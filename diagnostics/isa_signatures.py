"""Parameter lists of the element-wise ISA instructions in both NKI API generations, as the source rewrites
(``tile_split``, ``migrate``) bind call arguments: classic calls return their result and take ``mask=`` and
``dtype=``; new calls take the destination tile first and end with ``name=``. Read from the NKI API table
(``toolchain/facts/nki_api.py``), whose signatures are the simulator's (``toolchain/sim/isa_api.py``)."""

from __future__ import annotations

from nki_agent.toolchain.facts import nki_api

ELEMENTWISE = ("tensor_tensor", "activation", "tensor_scalar", "tensor_copy", "reciprocal", "scalar_tensor_tensor",
               "tensor_reduce", "memset")


def _params(generation: str) -> dict[str, tuple[str, ...]]:
    out = {}
    for name in ELEMENTWISE:
        r = nki_api.row("nisa", name)
        if r is not None and r.params(generation):
            out[name] = r.params(generation)
    return out


CLASSIC: dict[str, tuple[str, ...]] = _params(nki_api.CLASSIC)
NEW: dict[str, tuple[str, ...]] = _params(nki_api.NEW)
