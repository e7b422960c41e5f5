"""Checks that need no execution: the file reads as Python, and which NKI kernels it defines.

This is the toolchain's own minimal check (syntax, size, binary, kernel discovery, API generation);
the as-you-type rule engine lives in ``diagnostics``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .errors import NkiError, Problem, SourceLocation
from .tasks import MAX_SOURCE_BYTES, _read_source

_CLASSIC_MODULES = ("neuronxcc.nki",)
_NEW_MODULES = ("nki",)


@dataclass
class KernelInfo:
    name: str
    line: int
    generation: str


@dataclass
class CheckResult:
    path: str
    generation: str = ""
    kernels: list[KernelInfo] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def _generation(tree: ast.AST) -> str:
    classic = new = False
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for n in names:
            if n == "neuronxcc.nki" or n.startswith("neuronxcc.nki."):
                classic = True
            elif n == "nki" or n.startswith("nki."):
                new = True
    return "mixed" if classic and new else "classic" if classic else "new" if new else ""


def _is_jit(dec: ast.expr) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    name = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else ""
    return name in ("jit", "nki_jit", "baremetal", "simulate_kernel", "benchmark")


def check_source(path: str, source: str) -> CheckResult:
    res = CheckResult(path)
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        res.problems.append(Problem("sim_syntax_error", f"SyntaxError: {e.msg}",
                                    location=SourceLocation(path, e.lineno or 1, e.offset or 1, e.end_lineno,
                                                            e.end_offset)))
        return res
    except (RecursionError, MemoryError, ValueError) as e:
        res.problems.append(Problem("sim_bad_input", f"the file cannot be parsed: {type(e).__name__}",
                                    severity="info", location=SourceLocation(path, 1)))
        return res
    res.generation = _generation(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(_is_jit(d) for d in node.decorator_list):
            res.kernels.append(KernelInfo(node.name, node.lineno, res.generation))
    if not res.kernels and res.generation:
        res.problems.append(Problem("sim_no_kernel", "no function decorated with @nki.jit in this file",
                                    severity="info", location=SourceLocation(path, 1)))
    return res


def check_file(path: str) -> CheckResult:
    try:
        source = _read_source(path)
    except NkiError as e:
        p = Problem.from_error(e)
        return CheckResult(path, problems=[Problem(p.code, p.message, "info" if "bytes" in p.message or "binary" in
                                                   p.message else "error", p.location or SourceLocation(path, 1))])
    return check_source(path, source)


__all__ = ["MAX_SOURCE_BYTES", "check_file", "check_source", "CheckResult", "KernelInfo"]
