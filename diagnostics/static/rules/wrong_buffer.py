"""Operand in the wrong memory (``err_unsupported_memory``), for facts known without running:
``nl.load`` of an on-chip tile, compute on a kernel parameter (HBM), ``nl.store`` into an on-chip tile."""

from __future__ import annotations

from ..finding import Finding
from ..interp import Event
from ..values import TileV

CODE = "err_unsupported_memory"
KINDS = {"call"}
COMPUTE = {"exp", "log", "sqrt", "rsqrt", "add", "subtract", "multiply", "divide", "maximum", "minimum", "tanh",
           "sigmoid", "relu", "gelu", "silu", "square", "abs", "negative", "reciprocal", "sum", "max", "min", "mean",
           "softmax", "transpose", "matmul", "copy"}


def check(event: Event, ctx: object) -> list[Finding]:
    f = event.facts
    ns, name, args = f["ns"], f["name"], f["args"]
    if ns != "nl":
        return []
    if name == "load":
        src = args[0] if args else f["kwargs"].get("src")
        if isinstance(src, TileV) and src.buffer in ("sbuf", "psum"):
            return [Finding(CODE, f"nl.load reads HBM, but its source is already an on-chip ({src.buffer.upper()}) "
                            "tile; use it directly (or nl.copy)", event.node)]
    elif name == "store":
        dst = args[0] if args else f["kwargs"].get("dst")
        if isinstance(dst, TileV) and dst.buffer in ("sbuf", "psum"):
            return [Finding(CODE, f"nl.store writes HBM, but its destination is an on-chip ({dst.buffer.upper()}) "
                            "tile; assign with dst[...] = value instead", event.node)]
    elif name in COMPUTE:
        for a in args:
            if isinstance(a, TileV) and a.is_param and a.certain and a.buffer == "hbm":
                return [Finding(CODE, f"nl.{name} computes on SBUF/PSUM tiles, but `{a.name}` is a kernel argument "
                                "in HBM; nl.load it into a tile first", event.node)]
    return []
