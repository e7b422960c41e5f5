"""Shape lines: the ``# nki: a=(256, 512) float32`` comments giving a kernel's inputs when nothing else runs it
(the grammar is in the package docstring, ``toolchain/taskless/__init__.py``). ``shape_specs`` reads a buffer's
lines (kernel -> ``ShapeSpec``, and the ``ShapeProblem`` of each malformed line), ``shape_line`` writes the
pre-filled line of the "Add input shapes" action, and ``synthesise`` makes the random input of one argument
(used by the worker: numpy is imported only there)."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .source import IDENT, KernelDef, kernel_defs, parse

SHAPE_LINE = re.compile(r"^[ \t]*#[ \t]*nki(?:\[(?P<grid>[^\]]*)\])?:[ \t]*(?P<body>.*?)[ \t]*$", re.MULTILINE)
_BODY_START = re.compile(r"^[A-Za-z_]\w*\s*[=(]")  # "a=..." or "kernel(...": anything else is prose, ignored
_NAMED = re.compile(r"^(?P<kernel>[A-Za-z_]\w*)\s*\((?P<args>.*)\)$", re.DOTALL)
_DTYPE_WORD = re.compile(r"dtype$")
_TENSOR = re.compile(r"^\((?P<dims>[\s\d,]*)\)\s*(?P<dtype>[A-Za-z_][\w.]*)?$")
MAX_DIM = 1 << 20
MAX_ELEMENTS = 1 << 27  # one synthesised tensor: 512 MiB of float32 at most (the worker's memory limit is lower)
PLACEHOLDER_DIM = 128  # an unknown dimension in a pre-filled shape line: the user edits it
VALUE_PLACEHOLDER = "?"  # a value parameter in a pre-filled shape line: the line is refused until it is edited


@dataclass(frozen=True)
class Arg:
    """One argument of a shape line: a tensor (``shape``, ``dtype``) or a literal value (``value``)."""

    name: str
    shape: tuple[int, ...] | None = None
    dtype: str = "float32"
    value: Any = None


@dataclass(frozen=True)
class ShapeSpec:
    """A kernel's inputs from its shape line."""

    kernel: str
    line: int  # the comment's line (1-based)
    grid: tuple[int, ...]
    args: tuple[Arg, ...]


@dataclass(frozen=True)
class ShapeProblem:
    line: int
    column: int
    end_column: int
    message: str


def _split_top(s: str) -> list[str]:
    """``s`` split at the commas outside brackets and quotes."""
    out, depth, quote, cur = [], 0, "", []
    for ch in s:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur))
    return [p.strip() for p in out]


def _dtype_name(word: str) -> str:
    from nki_agent.toolchain.facts import dtypes

    short = word.split(".")[-1]
    try:
        return dtypes.name(dtypes.as_dtype(short))
    except (TypeError, ValueError):
        raise ValueError(f"unknown dtype `{word}` (e.g. float32, bfloat16, float16, int32)") from None


def _parse_arg(piece: str) -> Arg:
    name, eq, rest = piece.partition("=")
    name, rest = name.strip(), rest.strip()
    if not eq or not IDENT.match(name) or not rest:
        raise ValueError(f"`{piece}` is not `name=(d0, d1, ...) dtype` or `name=value`")
    if rest == VALUE_PLACEHOLDER:
        example = "'bfloat16'" if _DTYPE_WORD.search(name) else "4, True or 'bfloat16'"
        raise ValueError(f"`{name}={VALUE_PLACEHOLDER}`: write the value the kernel takes (a Python literal, e.g. "
                         f"{example}) or a tensor `(d0, d1, ...) dtype`")
    m = _TENSOR.match(rest)
    if m:
        dims_text = [d.strip() for d in m.group("dims").split(",") if d.strip()]
        dims = tuple(int(d) for d in dims_text)
        if not dims:
            raise ValueError(f"`{name}`: a tensor needs at least one dimension")
        if any(d < 1 or d > MAX_DIM for d in dims):
            raise ValueError(f"`{name}`: dimensions must be between 1 and {MAX_DIM}")
        n = 1
        for d in dims:
            n *= d
        if n > MAX_ELEMENTS:
            raise ValueError(f"`{name}`: {n} elements is more than the {MAX_ELEMENTS} a synthesised input may have")
        return Arg(name, dims, _dtype_name(m.group("dtype")) if m.group("dtype") else "float32")
    try:
        value = ast.literal_eval(rest)
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        raise ValueError(f"`{name}={rest}`: the value is neither a tensor `(d0, d1, ...) dtype` nor a Python "
                         "literal") from None
    if isinstance(value, list):
        value = list(value)
    return Arg(name, None, "", value)


def _grid(text: str | None) -> tuple[int, ...]:
    if text is None:
        return ()
    items = [g.strip() for g in text.split(",") if g.strip()]
    try:
        grid = tuple(int(g) for g in items)
    except ValueError:
        raise ValueError(f"grid `[{text}]` must be whole numbers, e.g. nki[2, 2]") from None
    if not grid or any(g < 1 or g > 4096 for g in grid):
        raise ValueError(f"grid `[{text}]` must have sizes between 1 and 4096")
    return grid


def shape_specs(text: str, tree: ast.Module | None = None,
                kernels: Sequence[KernelDef] | None = None) -> tuple[dict[str, ShapeSpec], list[ShapeProblem]]:
    """kernel name -> its shape line, and the problems of malformed lines. A line naming a kernel wins over
    an unnamed line above it; a comment that does not start like ``name=`` / ``name(`` is prose, ignored."""
    tree = parse(text) if tree is None else tree
    kernels = kernel_defs(tree, text) if kernels is None else list(kernels)
    named: dict[str, ShapeSpec] = {}
    above: dict[str, ShapeSpec] = {}
    problems: list[ShapeProblem] = []
    for m in SHAPE_LINE.finditer(text):
        body = m.group("body")
        if not _BODY_START.match(body):
            continue
        line = text.count("\n", 0, m.start()) + 1
        col = m.start("body") - m.start() + 1
        try:
            grid = _grid(m.group("grid"))
            nm = _NAMED.match(body)
            kernel = ""
            if nm and "=" not in body[:body.index("(")]:
                kernel, body = nm.group("kernel"), nm.group("args")
            args = tuple(_parse_arg(p) for p in _split_top(body))
            seen = [a.name for a in args]
            if len(set(seen)) != len(seen):
                raise ValueError("a parameter is named twice")
            if not kernel:
                below = [k for k in kernels if k.first_line > line]
                if not below:
                    raise ValueError("no kernel below this shape line (name it: `# nki: kernel(a=(128, 512) float32)`)")
                target = below[0]
                unknown = [a.name for a in args if a.name not in target.params]
                if unknown and target.params:
                    raise ValueError(f"`{target.name}` has no parameter {', '.join(f'`{u}`' for u in unknown)} "
                                     f"(its parameters: {', '.join(target.params)})")
                above.setdefault(target.name, ShapeSpec(target.name, line, grid, args))
            else:
                named[kernel] = ShapeSpec(kernel, line, grid, args)
        except ValueError as e:
            problems.append(ShapeProblem(line, col, col + len(m.group("body")), f"shape line: {e}"))
    return {**above, **named}, problems


def shape_line(kernel: KernelDef, known: dict[str, tuple[tuple[int | None, ...] | None, str | None]]) -> str:
    """A pre-filled shape line for ``kernel`` (``known``: param -> (shape, dtype) the static analysis knows;
    unknown dimensions are ``PLACEHOLDER_DIM``, an unknown rank is 2-D, an unknown dtype the one the body implies
    (``KernelDef.dtypes``: an MX kernel's scales are uint8), else float32). A parameter
    the kernel takes as a value (``KernelDef.values``: a dtype, a flag, a count) is ``name=?``, which the user
    must fill in: no tensor is guessed for it."""
    parts = []
    for p in kernel.required or kernel.params:
        if p in kernel.values and p not in known:
            parts.append(f"{p}={VALUE_PLACEHOLDER}")
            continue
        shape, dtype = known.get(p, (None, None))
        dtype = dtype or dict(kernel.dtypes).get(p)
        dims = [PLACEHOLDER_DIM if d is None else int(d) for d in shape] if shape else [PLACEHOLDER_DIM] * 2
        inner = ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "")
        try:
            dt = _dtype_name(dtype) if dtype else "float32"
        except ValueError:
            dt = "float32"
        parts.append(f"{p}=({inner}) {dt}")
    return f"{kernel.indent}# nki: {', '.join(parts)}"


def synthesise(arg: Arg, rng: Any) -> Any:
    """A random input for one shape-line argument (a literal value as written)."""
    import numpy as np

    from nki_agent.toolchain.facts import dtypes

    if arg.shape is None:
        return arg.value
    dt = dtypes.as_dtype(arg.dtype)
    if dt == dtypes.bool_:
        return rng.random(arg.shape) > 0.5
    if dt.kind in "iu":
        return rng.integers(0, 16, size=arg.shape).astype(dt)
    return rng.standard_normal(arg.shape, dtype=np.float32).astype(dt)


__all__ = ["MAX_DIM", "MAX_ELEMENTS", "PLACEHOLDER_DIM", "SHAPE_LINE", "VALUE_PLACEHOLDER", "Arg", "ShapeProblem",
           "ShapeSpec", "shape_line", "shape_specs", "synthesise"]
