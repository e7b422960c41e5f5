"""Checks that need no execution: the file reads as Python, and which NKI kernels it defines.

This is the toolchain's own minimal check (syntax, size, binary, kernel discovery, API generation — the
last two by the rules of ``source_facts``); the as-you-type rule engine lives in ``diagnostics``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from nki_agent.toolchain.facts.errors import NkiError, Problem, SourceLocation
from .source_facts import generation_of_tree, is_kernel
from .tasks import MAX_SOURCE_BYTES, _read_source


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
    res.generation = generation_of_tree(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_kernel(node):
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
