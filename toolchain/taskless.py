"""Feedback without a task: what runs a kernel file that has no task module, and how.

When task discovery (``task_discovery.discover``) finds nothing, a kernel file is still run under the
simulator, in its jailed worker, from the first of these that exists (``plans``):

1. ``main`` — the file's own ``if __name__ == "__main__":`` driver, run as ``python FILE`` would (with
   ``neuronxcc.nki`` / ``nki`` bound to the simulator). Its own checks are the verdict: a failing
   ``assert`` (``np.allclose`` false, ``np.testing.assert_allclose``) or a non-zero ``sys.exit`` is a
   ``sim_wrong_result`` problem at the line that failed; an NKI error is reported at the kernel's line.
2. ``test`` — a pytest test of the workspace that calls a kernel of the file: a ``test_*.py`` /
   ``*_test.py`` file that imports the kernel's module and names one of its kernels in a ``test_*``
   function (``find_tests``), run with pytest in the worker (the kernel module it imports is the file
   being simulated — the editor buffer's copy — not the one on disk).
3. ``shapes`` — inputs synthesised from shape lines (``shape_specs``), one comment per kernel::

       # nki: a=(256, 512) float32, b=(256, 512) float32         (above the kernel's decorator / def)
       # nki: my_kernel(a=(256, 512) float32, scale=0.5)        (anywhere: names the kernel)
       # nki[2, 2]: a=(256, 1024) float16, b=(256, 1024) float16  (launched as kernel[2, 2](...))

   ``name=(d0, d1, ...) dtype`` is a random tensor (dtype optional, float32 by default; any NKI
   dtype name, ``nl.`` / ``np.`` prefixes allowed); ``name=LITERAL`` passes a Python literal (number,
   string, ``True`` / ``False`` / ``None``, a list). Parameters left out keep their defaults.

A driver (or test) that launches no kernel of the file gives way to the next source; when none
launched one, the first one's outcome is the result. The result is a ``SimulateResult`` like a task's
simulation — ``trace``, ``inputs`` (of ``kernel_name``), and one ``launches`` entry per kernel of the
file that ran — with ``via`` saying what ran (``via_test`` the test's id), so hovers and inlay hints
get concrete shapes and the code lens can say "simulated via __main__".

This module has two halves: planning (pure: reads the buffer and the workspace's test files, never
executes them) in the parent, and ``run_job`` — the worker's ``taskless`` op — which executes user
code and must only ever run in the sandboxed worker (``sandbox.py``) or, for trusted callers, in
process. Like every worker module it writes plain JSON and does not import pydantic.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import os
import re
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

MAIN, TEST, SHAPES, NONE = "main", "test", "shapes", "none"
SHAPE_LINE = re.compile(r"^[ \t]*#[ \t]*nki(?:\[(?P<grid>[^\]]*)\])?:[ \t]*(?P<body>.*?)[ \t]*$", re.MULTILINE)
_BODY_START = re.compile(r"^[A-Za-z_]\w*\s*[=(]")  # "a=..." or "kernel(...": anything else is prose, ignored
_NAMED = re.compile(r"^(?P<kernel>[A-Za-z_]\w*)\s*\((?P<args>.*)\)$", re.DOTALL)
_TENSOR = re.compile(r"^\((?P<dims>[\s\d,]*)\)\s*(?P<dtype>[A-Za-z_][\w.]*)?$")
_IDENT = re.compile(r"^[A-Za-z_]\w*$")
MAX_DIM = 1 << 20
MAX_ELEMENTS = 1 << 27  # one synthesised tensor: 512 MiB of float32 at most (the worker's memory limit is lower)
MAX_TEST_FILES = 4000  # test files looked at per discovery (a workspace of generated tests is cut here)
MAX_TEST_BYTES = 1 << 20
PLACEHOLDER_DIM = 128  # an unknown dimension in a pre-filled shape line: the user edits it
_PRUNE = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", "env", ".tox", ".nox", "build",
          "dist", "site-packages", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".eggs"}


# ------------------------------------------------------------------------------------ source facts


@dataclass(frozen=True)
class KernelDef:
    name: str
    line: int  # the def line (1-based)
    first_line: int  # its first decorator's line
    end_line: int
    indent: str  # the def's indentation
    params: tuple[str, ...]  # positional and keyword parameters, in order
    required: tuple[str, ...]  # those without a default value


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Attribute):
        return _dotted(node.value) + "." + node.attr
    return node.id if isinstance(node, ast.Name) else ""


def parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None


def kernel_defs(tree: ast.Module | None, text: str) -> list[KernelDef]:
    """The kernels (functions with a kernel decorator) of a module, in source order."""
    from .source_facts import is_kernel

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
        out.append(KernelDef(node.name, node.lineno, first, node.end_lineno or node.lineno, indent, params, required))
    out.sort(key=lambda k: k.line)
    return out


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
    return any(isinstance(n, ast.Assert) or (isinstance(n, ast.Call) and _dotted(n.func).split(".")[-1] in _CHECKS)
               for n in ast.walk(block))


# ------------------------------------------------------------------------------------- shape lines


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
    from . import dtypes

    short = word.split(".")[-1]
    try:
        return dtypes.name(dtypes.as_dtype(short))
    except (TypeError, ValueError):
        raise ValueError(f"unknown dtype `{word}` (e.g. float32, bfloat16, float16, int32)") from None


def _parse_arg(piece: str) -> Arg:
    name, eq, rest = piece.partition("=")
    name, rest = name.strip(), rest.strip()
    if not eq or not _IDENT.match(name) or not rest:
        raise ValueError(f"`{piece}` is not `name=(d0, d1, ...) dtype` or `name=value`")
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
    unknown dimensions are ``PLACEHOLDER_DIM``, an unknown rank is 2-D, an unknown dtype float32)."""
    parts = []
    for p in kernel.required or kernel.params:
        shape, dtype = known.get(p, (None, None))
        dims = [PLACEHOLDER_DIM if d is None else int(d) for d in shape] if shape else [PLACEHOLDER_DIM] * 2
        inner = ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "")
        try:
            dt = _dtype_name(dtype) if dtype else "float32"
        except ValueError:
            dt = "float32"
        parts.append(f"{p}=({inner}) {dt}")
    return f"{kernel.indent}# nki: {', '.join(parts)}"


# ------------------------------------------------------------------------------------------- tests


@dataclass(frozen=True)
class TestRef:
    path: str  # absolute path of the test file
    node: str  # pytest node id after the path: "TestAdd::test_small" / "test_add"
    line: int
    score: int

    @property
    def label(self) -> str:
        """What the code lens shows: ``test_add.py::test_add``."""
        return f"{os.path.basename(self.path)}::{self.node}"


@dataclass
class _TestFile:
    imports: bool  # the file imports the module (by its last name)
    tests: list[tuple[str, int, frozenset[str], int]]  # (node id, line, names it refers to, score adjustment)
    aliases: dict[str, frozenset[str]]  # module-level name -> names its definition refers to


_CACHE: dict[tuple[str, str], tuple[tuple[int, int], _TestFile | None]] = {}
_CACHE_LOCK = threading.Lock()
_WALK: dict[str, tuple[float, list[str]]] = {}
WALK_TTL = 5.0  # seconds a workspace's list of test files is reused (a lens request per keystroke)


def _names(node: ast.AST) -> frozenset[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return frozenset(out)


def _imports(tree: ast.Module, module: str) -> bool:
    for n in ast.walk(tree):
        if isinstance(n, ast.Import) and any(a.name == module or a.name.endswith("." + module) for a in n.names):
            return True
        if isinstance(n, ast.ImportFrom):
            mod = n.module or ""
            if mod == module or mod.endswith("." + module) or any(a.name == module for a in n.names):
                return True
    return False


def _score(fn: ast.AST) -> int:
    names = _names(fn)
    decos = " ".join(_dotted(d) for d in getattr(fn, "decorator_list", []))
    score = 0
    if "simulation" in decos or names & {"simulate_kernel", "simulate", "simulation_only"}:
        score += 2
    if names & {"benchmark", "benchmark_result", "profile", "nc_latency", "neuron_profile"}:
        score -= 3
    return score


def _summarise(path: str, module: str) -> _TestFile | None:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TEST_BYTES + 1)
    except OSError:
        return None
    if len(raw) > MAX_TEST_BYTES or b"\x00" in raw:
        return None
    text = raw.decode("utf-8", "replace")
    if module not in text:
        return _TestFile(False, [], {})
    tree = parse(text)
    if tree is None:
        return None
    tests: list[tuple[str, int, frozenset[str], int]] = []
    aliases: dict[str, frozenset[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("test"):
                tests.append((node.name, node.lineno, _names(node), _score(node)))
            else:
                aliases[node.name] = _names(node)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    tests.append((f"{node.name}::{item.name}", item.lineno, _names(item), _score(item)))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            refs = _names(node.value) if node.value is not None else frozenset()
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        aliases[n.id] = refs
    return _TestFile(_imports(tree, module), tests, aliases)


def _home_or_above(path: str) -> bool:
    home = os.path.realpath(os.path.expanduser("~"))
    p = os.path.realpath(path)
    return p == "/" or p == home or home.startswith(p.rstrip("/") + "/")


def test_scope(kernel_path: str, root: str | None) -> str:
    """The folder searched for tests: the workspace root when the kernel is inside it (and it is not the home
    folder or one of its ancestors), else the kernel's own folder."""
    folder = os.path.dirname(os.path.abspath(kernel_path))
    if root:
        r = os.path.abspath(root)
        if (folder == r or folder.startswith(r.rstrip("/") + "/")) and not _home_or_above(r):
            return r
    return folder


def _test_files(scope: str) -> list[str]:
    now = time.monotonic()
    with _CACHE_LOCK:
        hit = _WALK.get(scope)
        if hit is not None and now - hit[0] < WALK_TTL:
            return hit[1]
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(scope):
        dirnames[:] = sorted(d for d in dirnames if d not in _PRUNE and not d.startswith(".") and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            if name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")):
                out.append(os.path.join(dirpath, name))
        if len(out) >= MAX_TEST_FILES:
            break
    with _CACHE_LOCK:
        _WALK[scope] = (now, out)
    return out


def find_tests(kernel_path: str, kernels: Sequence[str], root: str | None) -> list[TestRef]:
    """Tests of the workspace that call a kernel of ``kernel_path`` (best first): a test file that imports the
    kernel's module and a ``test*`` function (or ``Test*`` method) naming one of ``kernels``, directly or
    through a module-level name or helper function of its own that does. Tests marked or written for the
    simulator rank first, benchmarks (which need hardware) last, then the nearest to the kernel."""
    if not kernels:
        return []
    module = os.path.splitext(os.path.basename(kernel_path))[0]
    scope = test_scope(kernel_path, root)
    folder = os.path.dirname(os.path.abspath(kernel_path))
    wanted = set(kernels)
    found: list[tuple[int, int, str, int, TestRef]] = []
    for path in _test_files(scope):
        if os.path.abspath(path) == os.path.abspath(kernel_path):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        key, stamp = (path, module), (st.st_mtime_ns, st.st_size)
        with _CACHE_LOCK:
            hit = _CACHE.get(key)
        if hit is not None and hit[0] == stamp:
            summary = hit[1]
        else:
            summary = _summarise(path, module)
            with _CACHE_LOCK:
                if len(_CACHE) > 4 * MAX_TEST_FILES:
                    _CACHE.clear()
                _CACHE[key] = (stamp, summary)
        if summary is None or not summary.imports:
            continue
        reach = {a for a, refs in summary.aliases.items() if refs & wanted}
        for node, line, names, adjust in summary.tests:
            if names & wanted or names & reach:
                distance = len(os.path.relpath(path, folder).split(os.sep))
                ref = TestRef(path, node, line, adjust)
                found.append((-adjust, distance, path, line, ref))
    found.sort(key=lambda x: x[:4])
    return [f[4] for f in found]


def module_names(kernel_path: str) -> list[str]:
    """The names the kernel file is imported by: its file name, and its dotted name inside a package."""
    folder, base = os.path.split(os.path.abspath(kernel_path))
    stem = os.path.splitext(base)[0]
    names = [stem]
    parts = [stem]
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parts.insert(0, os.path.basename(folder))
        folder = os.path.dirname(folder)
        names.append(".".join(parts))
    return [n for n in names if all(_IDENT.match(p) for p in n.split("."))]


# ------------------------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class Plan:
    """One way to run the file without a task."""

    via: str  # main | test | shapes
    test: TestRef | None = None
    shapes: tuple[ShapeSpec, ...] = ()

    @property
    def label(self) -> str:
        return {MAIN: "__main__", SHAPES: "the shape line"}.get(self.via, self.test.label if self.test else "")


@dataclass
class Facts:
    """What planning read from the buffer (also what the "Add input shapes" action needs)."""

    kernels: list[KernelDef] = field(default_factory=list)
    main_line: int = 0
    shapes: dict[str, ShapeSpec] = field(default_factory=dict)
    shape_problems: list[ShapeProblem] = field(default_factory=list)
    tests: list[TestRef] = field(default_factory=list)
    main_checks: bool = False  # the driver asserts something itself (``main_checks``)


def read_facts(kernel_path: str, text: str, root: str | None, tests: bool = True) -> Facts:
    tree = parse(text)
    kernels = kernel_defs(tree, text)
    shapes, problems = shape_specs(text, tree, kernels)
    found = find_tests(kernel_path, [k.name for k in kernels], root) if tests and tree is not None else []
    return Facts(kernels, has_main(tree), shapes, problems, found, main_checks(tree))


def plans(facts: Facts) -> list[Plan]:
    """The ways to run the file, in order: its ``__main__`` driver, the best test, its shape lines."""
    out = []
    if facts.main_line:
        out.append(Plan(MAIN))
    if facts.tests:
        out.append(Plan(TEST, test=facts.tests[0]))
    if facts.shapes:
        order = {k.name: k.line for k in facts.kernels}
        out.append(Plan(SHAPES, shapes=tuple(sorted(facts.shapes.values(), key=lambda s: order.get(s.kernel, s.line)))))
    return out


def request(plan: Plan, kernel: str, origin: str, root: str | None, target: str | None,
            search_path: Sequence[str]) -> dict[str, Any]:
    """The worker request running ``plan`` on ``kernel`` (a copy of ``origin``, the user's file)."""
    req: dict[str, Any] = {"op": "taskless", "via": plan.via, "kernel": kernel, "target": target,
                           "search_path": [str(p) for p in search_path]}
    if plan.test is not None:
        scope = test_scope(origin, root)
        req.update(task=plan.test.path, test=f"{plan.test.path}::{plan.test.node}", test_label=plan.test.label,
                   rootdir=scope, modules=module_names(origin))
        extra = [os.path.dirname(plan.test.path), scope]
        req["search_path"] = list(dict.fromkeys(req["search_path"] + extra))
    return req


def simulate(kernel: str, run_one: Callable[[dict[str, Any]], Any], origin: str | None = None, text: str | None = None,
             root: str | None = None, target: str | None = None, search_path: Sequence[str] = ()) -> Any:
    """Run ``kernel`` without a task (the first plan that launches a kernel of the file; ``run_one`` runs one
    worker request and returns its ``SimulateResult``). ``origin``: the user's file ``kernel`` is a copy of
    (its name and folder find the tests); ``text``: its text (default: read ``kernel``)."""
    from .errors import NkiError, Problem, SourceLocation
    from .protocol import ProblemInfo, SimulateResult
    from .tasks import _read_source

    origin = origin or kernel
    if text is None:
        try:
            text = _read_source(kernel)
        except NkiError as e:  # a missing, binary or huge file
            return SimulateResult(kernel=kernel, via="none", problems=[ProblemInfo.of(Problem.from_error(e))])
    facts = read_facts(origin, text, root)
    shape_problems = [ProblemInfo.of(Problem("sim_bad_input", sp.message, "warning",
                                             SourceLocation(kernel, sp.line, sp.column, sp.line, sp.end_column)))
                      for sp in facts.shape_problems]
    first = None
    tried: list[str] = []
    for plan in plans(facts):
        res = run_one(request(plan, kernel, origin, root, target, search_path))
        res.tried = list(tried)
        if res.launches or _stopped_in_kernel(res, kernel):
            res.problems = res.problems + shape_problems
            return res
        tried.append(f"{plan.label} launched no kernel of this file")
        first = first or res
    if first is not None:
        first.tried = tried
        first.problems = first.problems + shape_problems
        return first
    return SimulateResult(kernel=kernel, via="none", problems=shape_problems)


def _stopped_in_kernel(res: Any, kernel: str) -> bool:
    """An NKI error located in the kernel file stops the search (the driver reached a kernel and it failed)."""
    for p in res.problems:
        loc = p.location
        if p.severity == "error" and loc is not None and _same(loc.path, kernel) and p.code.startswith(("err_", "sim_")) \
                and p.code not in ("sim_python_exception", "sim_task_error", "sim_bad_input", "sim_syntax_error"):
            return True
        if p.code in ("sim_syntax_error", "sim_timeout", "sim_memory_limit", "sim_worker_crash", "sim_cancelled",
                      "sim_output_limit"):
            return True  # the file itself does not run (or the run was stopped): another source would not help
    return False


def _same(a: str, b: str) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return a == b


# ----------------------------------------------------------------------------- the worker's op


@dataclass
class _Launch:
    kernel: str
    file: str
    inputs: list[dict[str, Any]]
    grid: list[int]
    record: Any = None


def _spec(value: Any) -> dict[str, Any]:
    from . import dtypes
    from .sim.kernel import to_numpy_input

    try:
        arr = to_numpy_input(value)
    except Exception:  # noqa: BLE001 - an odd object a driver passes: described by its type
        arr = None
    if arr is None:
        return {"shape": None, "dtype": type(value).__name__, "value": repr(value)[:80]}
    return {"shape": [int(d) for d in arr.shape], "dtype": dtypes.name(arr.dtype)}


def _arg_specs(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    """One spec per parameter of ``func`` in signature order (``*args`` / ``**kwargs`` left out)."""
    import inspect

    try:
        sig = inspect.signature(func)
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
    except (TypeError, ValueError):
        return [_spec(a) for a in args]
    return [_spec(bound.arguments[n]) for n, p in sig.parameters.items()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and n in bound.arguments]


@contextlib.contextmanager
def _observing(launches: list[_Launch], target: str | None, time_limit: float | None) -> Iterator[None]:
    """Every top-level kernel launch in the block is recorded (kernel, file, argument specs, its record)."""
    from .sim import kernel as K
    from .sim import runtime

    original = K.launch

    def launch(kernel: Any, grid: tuple[int, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if runtime.current() is None:
            code = getattr(kernel.func, "__code__", None)
            launches.append(_Launch(kernel.__name__, code.co_filename if code else "", _arg_specs(kernel.func, args, kwargs),
                                    list(grid)))
        return original(kernel, grid, args, kwargs)

    def observe(rec: Any) -> None:
        pending = [x for x in launches if x.record is None]
        if pending:
            pending[-1].record = rec

    K.launch = launch  # type: ignore[assignment]
    token = K.DEFAULTS.set(K.LaunchDefaults(target=target, time_limit=time_limit, observer=observe))
    try:
        yield
    finally:
        K.DEFAULTS.reset(token)
        K.launch = original  # type: ignore[assignment]


_REFUSED = {errno.EPERM, errno.EACCES, errno.EROFS, errno.ENETUNREACH, errno.EAGAIN, errno.ENOSYS}


def _problem_of(e: BaseException, via: str, path: str) -> dict[str, Any] | None:
    """The problem a driver's / test's exception is: an NKI error as it is, a failed check as a wrong
    result at the line that failed, anything else as a Python exception there."""
    from .errors import NkiError, Problem, SourceLocation
    from .location import traceback_location

    what = {MAIN: "the __main__ driver", TEST: "the test"}.get(via, "the run")
    loc = traceback_location(e.__traceback__) or SourceLocation(path, 1)
    if isinstance(e, NkiError):
        return Problem.from_error(e).as_dict()
    if isinstance(e, SystemExit):
        if e.code in (None, 0):
            return None
        return Problem("sim_wrong_result", f"{what} exited with status {e.code!r}: its own check failed", location=loc).as_dict()
    if isinstance(e, AssertionError):
        detail = str(e).strip()
        detail = (": " + detail[:600]) if detail else ""
        return Problem("sim_wrong_result", f"{what}'s check failed (AssertionError){detail}", location=loc).as_dict()
    if isinstance(e, MemoryError):
        return Problem("sim_memory_limit", f"{what} exceeded the simulation memory limit", location=loc).as_dict()
    note = ""
    if isinstance(e, OSError) and e.errno in _REFUSED:
        note = (" (the sandbox refuses it: kernels and their drivers run with no new processes, no network, and "
                "nothing writable outside a private temporary folder)")
    return Problem("sim_python_exception", f"{type(e).__name__} in {what}: {str(e)[:600]}{note}", location=loc).as_dict()


def _exec_file(path: str, name: str, search_path: Sequence[str]) -> types.ModuleType:
    """Compile and run a user file as module ``name`` (the simulator's NKI modules must be installed)."""
    from .errors import NkiError, SourceLocation
    from .tasks import _put_on_path, _read_source, search_dirs

    source = _read_source(path)
    try:
        code = compile(source, path, "exec")
    except SyntaxError as e:
        loc = SourceLocation(path, e.lineno or 1, e.offset or 1, e.end_lineno, e.end_offset)
        raise NkiError("sim_syntax_error", f"SyntaxError: {e.msg}", loc) from None
    module = types.ModuleType(name)
    module.__file__ = path
    _put_on_path(search_dirs(path, search_path))
    sys.modules[name] = module
    exec(code, module.__dict__)
    return module


def _run_main(req: dict[str, Any], extra: list[str], problems: list[dict[str, Any]]) -> None:
    path = req["kernel"]
    sys.argv = [path]
    try:
        _exec_file(path, "__main__", extra)
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        p = _problem_of(e, MAIN, path)
        if p is not None:
            problems.append(p)


class _PytestCollector:
    """A pytest plugin keeping each failure's exception (with its traceback) and each test's outcome."""

    def __init__(self) -> None:
        self.failures: list[BaseException] = []
        self.outcomes: list[tuple[str, str]] = []

    def pytest_exception_interact(self, node: Any, call: Any, report: Any) -> None:
        if call is not None and call.excinfo is not None:
            self.failures.append(call.excinfo.value)

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call" or report.outcome != "passed":
            self.outcomes.append((report.nodeid, report.outcome))


def _load_kernel_module(path: str, names: list[str], extra: list[str]) -> None:
    """The kernel file, loaded once, answers every name it is imported by (so a test gets this copy)."""
    import importlib

    if not names:
        return
    module = _exec_file(path, names[0], extra)
    for dotted in names[1:]:
        parent_name, _, last = dotted.rpartition(".")
        try:
            parent = importlib.import_module(parent_name)
        except Exception:  # noqa: BLE001 - a package that does not import: the plain name still works
            continue
        sys.modules[dotted] = module
        setattr(parent, last, module)


def _run_test(req: dict[str, Any], extra: list[str], problems: list[dict[str, Any]]) -> None:
    from .errors import Problem, SourceLocation

    path, test = req["kernel"], str(req.get("test") or "")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the workspace's tests, not every installed plugin
    try:
        import pytest
    except ImportError:
        problems.append(Problem("sim_task_error", f"pytest is not installed where kernels run; cannot run {test}",
                                location=SourceLocation(path, 1)).as_dict())
        return
    try:
        _load_kernel_module(path, [n for n in req.get("modules") or [] if isinstance(n, str)], extra)
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        p = _problem_of(e, TEST, path)
        if p is not None:
            problems.append(p)
        return
    collector = _PytestCollector()
    args = [test, "-q", "-x", "-p", "no:cacheprovider", "-p", "no:stepwise", "-o", "addopts=", "--no-header"]
    rootdir = req.get("rootdir")
    if isinstance(rootdir, str) and rootdir:
        args.append(f"--rootdir={rootdir}")
    try:
        code = pytest.main(args, plugins=[collector])
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        p = _problem_of(e, TEST, path)
        if p is not None:
            problems.append(p)
        return
    for failure in collector.failures[:1]:
        p = _problem_of(failure, TEST, path)
        if p is not None:
            problems.append(p)
    if not collector.failures and int(code) not in (0,):
        why = {5: "collected no test", 4: "could not be started (usage error)", 3: "hit an internal error",
               2: "was interrupted (collection error?)"}.get(int(code), f"exited with status {int(code)}")
        problems.append(Problem("sim_task_error", f"pytest {why} for {test}", location=SourceLocation(path, 1)).as_dict())


def synthesise(arg: Arg, rng: Any) -> Any:
    """A random input for one shape-line argument (a literal value as written)."""
    import numpy as np

    from . import dtypes

    if arg.shape is None:
        return arg.value
    dt = dtypes.as_dtype(arg.dtype)
    if dt == dtypes.bool_:
        return rng.random(arg.shape) > 0.5
    if dt.kind in "iu":
        return rng.integers(0, 16, size=arg.shape).astype(dt)
    return rng.standard_normal(arg.shape, dtype=np.float32).astype(dt)


def _run_shapes(req: dict[str, Any], extra: list[str], problems: list[dict[str, Any]]) -> None:
    import numpy as np

    from .errors import NkiError, Problem, SourceLocation
    from .tasks import _read_source, find_kernel

    path = req["kernel"]
    text = _read_source(path)
    specs, _ = shape_specs(text)
    module = _exec_file(path, "nki_agent_kernel", extra)
    rng = np.random.default_rng(0)
    order = {k.name: k.line for k in kernel_defs(parse(text), text)}
    for spec in sorted(specs.values(), key=lambda s: order.get(s.kernel, s.line)):
        try:
            kernel = find_kernel(module, spec.kernel)
            kwargs = {a.name: synthesise(a, rng) for a in spec.args}
            (kernel[spec.grid] if spec.grid else kernel)(**kwargs)
        except NkiError as e:
            problems.append(Problem.from_error(e).as_dict())
        except Exception as e:  # noqa: BLE001 - a shape line the kernel does not accept
            loc = SourceLocation(path, spec.line, 1)
            problems.append(Problem("sim_python_exception", f"{type(e).__name__} running `{spec.kernel}` on the shape "
                                    f"line's inputs: {str(e)[:600]}", location=loc).as_dict())


def _summary(a: Any) -> dict[str, Any]:
    from .simulate import _summary as summary
    from .verify import _to_np

    return summary(_to_np(a))


def run_job(req: dict[str, Any]) -> dict[str, Any]:
    """The worker's ``taskless`` op: run the kernel file as ``req["via"]`` says (``main`` / ``test`` /
    ``shapes``) and describe what ran, in ``SimulateResult`` form. Executes user code: sandboxed worker only
    (or ``in_process``, for trusted callers)."""
    from dataclasses import asdict as as_dict

    from .errors import NkiError, Problem
    from .shim import install
    from .tasks import search_path
    from .verify import _as_list

    path, via = str(req["kernel"]), str(req.get("via", ""))
    extra = search_path(req)
    out: dict[str, Any] = {"op": "simulate", "kernel": path, "task": "", "via": via, "ran": False, "problems": [],
                           "outputs": [], "via_test": str(req.get("test_label") or "")}
    problems: list[dict[str, Any]] = out["problems"]
    launches: list[_Launch] = []
    runner = {MAIN: _run_main, TEST: _run_test, SHAPES: _run_shapes}.get(via)
    if runner is None:
        problems.append(Problem("sim_bad_input", f"unknown way to run a kernel without a task: {via!r}").as_dict())
        return out
    install()
    time_limit = req.get("time_limit")
    t0 = time.perf_counter()
    try:
        with _observing(launches, req.get("target"), float(time_limit) if time_limit else None):
            runner(req, extra, problems)
    except NkiError as e:
        problems.append(Problem.from_error(e).as_dict())
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        p = _problem_of(e, via, path)
        if p is not None:
            problems.append(p)
    out["seconds"] = time.perf_counter() - t0
    mine = [x for x in launches if _same(x.file, path)]
    ours = [x for x in mine if x.record is not None]
    trace: list[dict[str, Any]] = []
    for x in ours:
        trace.extend(as_dict(t) for t in x.record.trace[:2000 - len(trace)])
    out["launches"] = [{"kernel_name": x.kernel, "inputs": x.inputs, "grid": x.grid, "completed": x.record is not None,
                        "outputs": [_summary(r) for r in _as_list(x.record.outputs) if r is not None][:16]
                        if x.record is not None else []} for x in mine[:64]]
    if mine:
        out.update(kernel_name=mine[0].kernel, inputs=mine[0].inputs, grid=mine[0].grid)
    if ours:
        first = ours[0]
        rec = first.record
        out.update(ran=True, kernel_name=first.kernel, inputs=first.inputs,
                   outputs=[_summary(r) for r in _as_list(rec.outputs) if r is not None][:16],
                   target=rec.target, generation=rec.generation, grid=list(rec.grid), trace=trace,
                   peak_sbuf_bytes=max(x.record.peak_sbuf_bytes for x in ours),
                   peak_psum_bytes=max(x.record.peak_psum_bytes for x in ours),
                   instructions=sum(x.record.instructions for x in ours))
        seen = set()
        for x in ours:  # the launches' warnings (memory pressure, on-chip outputs), once each
            for w in x.record.warnings:
                p = Problem.from_error(w).as_dict()
                key = (p["code"], str(p["location"]))
                if key not in seen:
                    seen.add(key)
                    problems.append(p)
    return out


@contextlib.contextmanager
def contained() -> Iterator[None]:
    """For an in-process run: what it prints goes to stderr (stdout may be a JSON answer); afterwards
    ``__main__``, ``sys.argv``, ``sys.path``, the simulator modules and whatever modules the run imported are
    put back (trusted callers only: the code still runs in this process)."""
    from .shim import install, uninstall

    saved_modules = dict(sys.modules)
    saved_argv, saved_path = list(sys.argv), list(sys.path)
    saved_env = os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    shim = install()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        uninstall(shim)
        for name in [n for n in sys.modules if n not in saved_modules]:
            del sys.modules[name]
        sys.modules.update(saved_modules)
        sys.argv[:], sys.path[:] = saved_argv, saved_path
        if saved_env is None:
            os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
        else:
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = saved_env


__all__ = ["MAIN", "NONE", "SHAPES", "TEST", "Arg", "Facts", "KernelDef", "Plan", "ShapeSpec", "TestRef", "find_tests", "kernel_defs", "module_names", "plans", "read_facts", "run_job", "shape_line", "shape_specs",
           "simulate"]
