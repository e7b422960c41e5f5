"""Facts about a kernel file that need no execution: which decorators make a kernel, which NKI API
generation the file imports, and what its import aliases name.

The one place these are decided: the toolchain's check, the static checker, the server's facts and code
lens, the CLI's watcher and the log parsers all read them here. Pure (``ast`` and ``re`` only).

- A kernel is a function with a decorator whose last dotted segment is one of ``KERNEL_DECORATORS``
  (``@nki.jit``, ``@jit(...)``, ``@nki.baremetal``, ``@benchmark(...)``, ...).
- The generation is ``classic`` when the file imports ``neuronxcc.nki`` (or a submodule), ``new`` when it
  imports ``nki``, ``mixed`` for both and ``""`` for neither.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

CLASSIC, NEW, MIXED = "classic", "new", "mixed"
CLASSIC_ROOT = "neuronxcc.nki"
NEW_ROOT = "nki"
# decorators that make a function an NKI kernel (the last dotted segment of the decorator expression)
KERNEL_DECORATORS: tuple[str, ...] = ("jit", "nki_jit", "trace", "baremetal", "benchmark", "simulate_kernel",
                                      "profile")
_NAMES = "|".join(KERNEL_DECORATORS)
# a kernel decorator line in text (``@nki.jit``, ``@ nki.baremetal(...)``), for scans that do not parse
KERNEL_DECORATOR_LINE = re.compile(rf"^[ \t]*@[ \t]*(?:[\w.]+\.)?(?:{_NAMES})\b", re.MULTILINE)
# a kernel decorator line, any further decorator lines, then the ``def`` (group ``def``: where it starts)
KERNEL_DEF = re.compile(rf"^[ \t]*@[ \t]*(?:[\w.]+\.)?(?:{_NAMES})\b.*\n(?:[ \t]*@.*\n)*"
                        r"(?P<def>[ \t]*(?:async[ \t]+)?def )", re.MULTILINE)


def decorator_name(dec: ast.expr) -> str:
    """``nki.jit`` / ``nki.jit(mode=...)`` / ``jit`` -> ``jit``; anything else -> ``""``."""
    target = dec.func if isinstance(dec, ast.Call) else dec
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def is_kernel_decorator(dec: ast.expr | str) -> bool:
    """True for a kernel decorator (an expression, or its dotted name as text)."""
    name = dec.rsplit(".", 1)[-1] if isinstance(dec, str) else decorator_name(dec)
    return name in KERNEL_DECORATORS


def is_kernel(fn: ast.AST) -> bool:
    return isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
        is_kernel_decorator(d) for d in fn.decorator_list)


def kernel_def_line(text: str) -> int:
    """1-based line of the first kernel's ``def`` in ``text`` (1 when there is none)."""
    m = KERNEL_DEF.search(text)
    return text.count("\n", 0, m.start("def")) + 1 if m else 1


def has_kernel(text: str) -> bool:
    return KERNEL_DECORATOR_LINE.search(text) is not None


# -- API generation ------------------------------------------------------------------------------------
def is_classic_module(name: str) -> bool:
    return name == CLASSIC_ROOT or name.startswith(CLASSIC_ROOT + ".")


def is_new_module(name: str) -> bool:
    return name == NEW_ROOT or name.startswith(NEW_ROOT + ".")


def generation_of_modules(names: Iterable[str]) -> str:
    """The generation of a file importing (or aliasing) these qualified names."""
    classic = new = False
    for n in names:
        if is_classic_module(n):
            classic = True
        elif is_new_module(n):
            new = True
    return MIXED if classic and new else CLASSIC if classic else NEW if new else ""


def generation_of_aliases(aliases: dict[str, str]) -> str:
    return generation_of_modules(aliases.values())


def imported_modules(tree: ast.AST) -> list[str]:
    """Every module named by an ``import`` / absolute ``from ... import`` anywhere in ``tree``."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def generation_of_tree(tree: ast.AST) -> str:
    return generation_of_modules(imported_modules(tree))


def generation_of_source(text: str) -> str:
    """The generation of a file's text ("" when it does not parse or imports no NKI)."""
    try:
        return generation_of_tree(ast.parse(text))
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return ""


# -- import aliases --------------------------------------------------------------------------------------
def import_aliases(body: Iterable[ast.stmt]) -> dict[str, str]:
    """Local name -> qualified module/object of module-level imports (later bindings win, as in Python;
    ``import a.b`` binds ``a`` and makes ``a.b`` resolvable)."""
    out: dict[str, str] = {}
    for node in body:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    out[a.asname] = a.name
                else:
                    root = a.name.split(".")[0]
                    out[root] = root
                    out.setdefault(a.name, a.name)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def namespace_of(qualified: str) -> str | None:
    """``neuronxcc.nki.language`` / ``nki.language`` -> ``nl``; ``...isa`` -> ``nisa``; ``...typing`` -> ``nt``."""
    for root in (CLASSIC_ROOT, NEW_ROOT):
        for sub, ns in (("language", "nl"), ("isa", "nisa"), ("typing", "nt")):
            if qualified == f"{root}.{sub}":
                return ns
    return None


def namespaces(aliases: dict[str, str]) -> dict[str, str]:
    """Local alias -> ``nl`` | ``nisa`` | ``nt`` for the aliases bound to an NKI namespace module."""
    out = {}
    for local, qual in aliases.items():
        ns = namespace_of(qual)
        if ns is not None:
            out[local] = ns
    return out


# a task's own target at column 0 (``TARGET = "trn3"``), read by the simulator from the task module
_DECLARED_TARGET = re.compile(r"^TARGET[ \t]*=[ \t]*[\"'](\w+)[\"']", re.MULTILINE)


def declared_target(text: str) -> str | None:
    """The ``TARGET = "..."`` a task file (or a kernel file that is its own task) declares, if any."""
    m = _DECLARED_TARGET.search(text)
    return m.group(1) if m else None
