"""Less common ``nki.isa`` instructions (scans, predicated copies, shuffles, gathers, DMA transpose ...).

``CLASSIC`` and ``NEW`` map instruction names to their implementation for each API generation;
``isa_api`` merges them into the ``nki.isa`` namespaces.
"""

from __future__ import annotations

from typing import Any, Callable

CLASSIC: dict[str, Callable[..., Any]] = {}
NEW: dict[str, Callable[..., Any]] = {}
