"""The kernel file's own facts a task-less run reads (pure ``ast``, never executed): its kernels
(``kernel_defs``: name, lines, indentation, parameters) and its ``if __name__ == "__main__":`` driver
(``main_block`` / ``has_main``, and ``main_checks``: whether the driver checks anything itself)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

IDENT = re.compile(r"^[A-Za-z_]\w*$")  # a Python identifier (a parameter, a module name's part)


@dataclass(frozen=True)
class KernelDef:
    name: str
    line: int  # the def line (1-based)
    first_line: int  # its first decorator's line
    end_line: int
    indent: str  # the def's indentation
    params: tuple[str, ...]  # positional and keyword parameters, in order
    required: tuple[str, ...]  # those without a default value
    values: tuple[str, ...] = ()  # required ones that are values, not tensors (``value_params``)
    dtypes: tuple[tuple[str, str], ...] = ()  # (param, dtype) the body implies (``param_dtypes``)


def dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        return dotted(node.func)
    if isinstance(node, ast.Attribute):
        return dotted(node.value) + "." + node.attr
    return node.id if isinstance(node, ast.Name) else ""


def parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None


def kernel_defs(tree: ast.Module | None, text: str) -> list[KernelDef]:
    """The kernels (functions with a kernel decorator) of a module, in source order."""
    from ..source_facts import is_kernel

    if tree is None:
        return []
    lines = text.split("\n")
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not is_kernel(node):
            continue
        a = node.args
        positional = a.posonlyargs + a.args
        params = tuple(p.arg for p in positional + a.kwonlyargs)
        required = tuple(p.arg for p in positional[:len(positional) - len(a.defaults)])
        required += tuple(p.arg for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is None)
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        def_text = lines[node.lineno - 1] if node.lineno <= len(lines) else ""
        indent = def_text[:len(def_text) - len(def_text.lstrip())]
        out.append(KernelDef(node.name, node.lineno, first, node.end_lineno or node.lineno, indent, params, required,
                             value_params(node, required), param_dtypes(node, required)))
    out.sort(key=lambda k: k.line)
    return out


VALUE_TYPES = {"int", "float", "bool", "str", "dtype"}  # annotations of parameters that are not tensors
_DTYPE_NAME = re.compile(r"(?:^|_)dtype$")  # dtype, mx_dtype, out_dtype (the nki-samples' MX kernels)
_RANGES = {"range", "affine_range", "sequential_range", "static_range"}


def _dims(node: ast.expr) -> set[str]:
    """The names written as elements of a shape tuple ``(n, 64)``."""
    return {e.id for e in node.elts if isinstance(e, ast.Name)} if isinstance(node, ast.Tuple) else set()


def value_params(fn: ast.FunctionDef | ast.AsyncFunctionDef, names: tuple[str, ...]) -> tuple[str, ...]:
    """Those of ``names`` that ``fn`` takes as values, not tensors: annotated ``int``/``float``/``bool``/``str``,
    or — unless the body reads an attribute (``.shape``) or elements of it, as of a tensor — named like a dtype
    (``mx_dtype``), passed as a ``dtype=`` argument, counted over (``range(n)``, ``nl.affine_range(n)``) or
    written as a size in a shape tuple (``x.shape == (n, 64)``, ``nl.ndarray((n, 64), ...)``)."""
    args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    annotated = {a.arg for a in args if a.annotation is not None
                 and dotted(a.annotation).rsplit(".", 1)[-1] in VALUE_TYPES}
    tensor, value = set(), {n for n in names if _DTYPE_NAME.search(n)}
    for node in ast.walk(fn):
        if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.value, ast.Name):
            tensor.add(node.value.id)
        elif isinstance(node, ast.keyword) and node.arg == "dtype" and isinstance(node.value, ast.Name):
            value.add(node.value.id)
        elif isinstance(node, ast.Call) and dotted(node.func).rsplit(".", 1)[-1] in _RANGES:
            value.update(a.id for a in node.args if isinstance(a, ast.Name))
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "shape":
            value.update(*(_dims(c) for c in node.comparators))  # assert x.shape == (n, 64): n is a size
        elif isinstance(node, ast.Call) and node.args:
            value.update(_dims(node.args[0]))  # nl.ndarray((n, 64), ...): a size
    return tuple(n for n in names if n in annotated or (n in value and n not in tensor))


_MX_INSTRUCTIONS = {"nc_matmul_mx", "quantize_mx"}
_SCALE_NAME = re.compile(r"(?:^|_)scales?$")  # stationary_mx_scale, moving_scale (the nki-samples' MX kernels)


def param_dtypes(fn: ast.FunctionDef | ast.AsyncFunctionDef, names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(param, dtype) of tensor parameters whose dtype the body implies: in a kernel that runs an MX instruction
    (``nisa.nc_matmul_mx`` / ``nisa.quantize_mx``), a parameter named as a scale is ``uint8`` — MX scales are
    8-bit exponents (E8M0) held as ``uint8``, as the NKI ISA documents for both instructions."""
    calls = {dotted(n.func).rsplit(".", 1)[-1] for n in ast.walk(fn) if isinstance(n, ast.Call)}
    if not calls & _MX_INSTRUCTIONS:
        return ()
    return tuple((n, "uint8") for n in names if _SCALE_NAME.search(n))


def main_block(tree: ast.Module | None) -> ast.If | None:
    """The module's ``if __name__ == "__main__":`` block, if any."""
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1 \
                and isinstance(node.test.ops[0], ast.Eq):
            sides = [node.test.left, node.test.comparators[0]]
            if any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and \
                    any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides):
                return node
    return None


def has_main(tree: ast.Module | None) -> int:
    """The line of the module's ``if __name__ == "__main__":`` block (0: none)."""
    block = main_block(tree)
    return block.lineno if block is not None else 0


_CHECKS = {"assert_allclose", "assert_array_equal", "assert_array_almost_equal", "assert_equal", "exit"}


def main_checks(tree: ast.Module | None) -> bool:
    """Whether the ``__main__`` block checks anything itself (an ``assert``, ``np.testing.assert_*``,
    ``sys.exit``): without one, a driver that runs to the end only says the kernel ran."""
    block = main_block(tree)
    if block is None:
        return False
    return any(isinstance(n, ast.Assert) or (isinstance(n, ast.Call) and dotted(n.func).split(".")[-1] in _CHECKS)
               for n in ast.walk(block))


__all__ = ["IDENT", "KernelDef", "dotted", "has_main", "kernel_defs", "main_block", "main_checks", "parse"]
