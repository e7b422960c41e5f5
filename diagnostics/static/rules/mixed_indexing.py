"""Slices mixed with ``nl.arange`` index arrays in one subscript
(``err_unsupported_mixing_basic_advanced_tensor_indexing``)."""

from __future__ import annotations

from ..finding import Finding
from ..interp import Event

CODE = "err_unsupported_mixing_basic_advanced_tensor_indexing"
KINDS = {"subscript"}


def check(event: Event, ctx: object) -> list[Finding]:
    kinds = event.facts["kinds"]
    if "index" in kinds and ("slice" in kinds or "ellipsis" in kinds):
        return [Finding(CODE, "a subscript mixes slices with nl.arange index arrays; use all slices or all "
                        "nl.arange indices (e.g. nl.arange(n)[None, :] instead of ':')", event.node)]
    return []
