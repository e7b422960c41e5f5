"""Memory regions of a NeuronCore as the kernel names them (``nl.sbuf``, ``nl.psum``, ``nl.shared_hbm`` ...)."""

from __future__ import annotations

from typing import Any


class Buffer:
    """A memory region. ``kind`` is ``hbm``, ``sbuf`` or ``psum``; HBM is ``shared`` or private."""

    __slots__ = ("kind", "shared", "label", "params")

    def __init__(self, kind: str, shared: bool = False, label: str | None = None, params: Any = None) -> None:
        self.kind = kind
        self.shared = shared
        self.label = label or kind
        self.params = params

    @property
    def is_hbm(self) -> bool:
        return self.kind == "hbm"

    @property
    def is_on_chip(self) -> bool:
        return self.kind in ("sbuf", "psum")

    def __call__(self, *args: Any, **kwargs: Any) -> "Buffer":
        # classic direct allocation spells buffers as calls (``nl.sbuf.mod_alloc(...)`` results, ``auto_alloc()``)
        return Buffer(self.kind, self.shared, self.label, (args, kwargs))

    def view(self, *args: Any, **kwargs: Any) -> "Buffer":
        return self

    def mod_alloc(self, *args: Any, **kwargs: Any) -> "Buffer":
        return Buffer(self.kind, self.shared, self.label, ("mod_alloc", args, kwargs))

    def alloc(self, *args: Any, **kwargs: Any) -> "Buffer":
        return Buffer(self.kind, self.shared, self.label, ("alloc", args, kwargs))

    def auto_alloc(self, *args: Any, **kwargs: Any) -> "Buffer":
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Buffer) and other.kind == self.kind and other.shared == self.shared

    def __hash__(self) -> int:
        return hash((self.kind, self.shared))

    def __repr__(self) -> str:
        return f"nl.{self.label}"


sbuf = Buffer("sbuf")
psum = Buffer("psum")
shared_hbm = Buffer("hbm", shared=True, label="shared_hbm")
private_hbm = Buffer("hbm", shared=False, label="private_hbm")
hbm = Buffer("hbm", shared=False, label="hbm")


def as_buffer(b: Any) -> Buffer:
    """Accept a Buffer, a buffer name string (classic allowed strings) or None (SBUF)."""
    if b is None:
        return sbuf
    if isinstance(b, Buffer):
        return b
    if isinstance(b, str):
        return {"sbuf": sbuf, "psum": psum, "shared_hbm": shared_hbm, "private_hbm": private_hbm,
                "hbm": hbm}.get(b, sbuf)
    kind = getattr(b, "kind", None) or getattr(b, "name", None)
    if isinstance(kind, str):
        return as_buffer(kind.lower())
    return sbuf
