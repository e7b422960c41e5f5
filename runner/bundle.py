"""What a client sends a runner for one kernel: its files (kernel, task, sibling modules), and the way back.

``bundle`` reads the kernel and the task (a kernel that is its own task is sent once, ``task=None`` in
the request) and collects the sibling modules they import, so a kernel split over ``kernel.py`` +
``helpers.py`` runs remotely as it does locally. Imports are read with ``ast`` (a file that does not
parse contributes none); a module is sent when it is a top-level ``NAME.py`` in the importing file's
own folder or in a ``search_path`` folder (that order, as ``tasks.search_dirs``), transitively, at
most ``protocol.MAX_MODULES`` of them; packages, the standard library and installed packages are the
runner's own. The runner writes every file into one flat folder, so a module name found in both the
kernel's and the task's folders is sent once (the kernel's). Files named in ``protect`` are never
sent (the agent's protected originals). A kernel or task whose file name is not a valid module name
(``my-kernel.py``, ``1st.py``) is sent under a safe one.

``PathMap`` turns the runner's paths in a result (its job folder) back into the client's own paths.
``dependencies`` is the same closure as local paths, for ``nki-agent watch``.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..toolchain.protocol import MAX_MODULES, MAX_SOURCE_CHARS, JobResult, Location, ProblemInfo, SourceFile

_VALID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\.py$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,60}$")


class BundleError(ValueError):
    """The kernel or the task cannot be sent (unreadable, binary, too large); ``path`` says which."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


def read_source(path: str) -> str:
    """The text of a kernel, task or module file, as the toolchain reads one (UTF-8, no NUL, size-capped)."""
    try:
        size = os.path.getsize(path)
        if size > 4 * MAX_SOURCE_CHARS:
            raise BundleError(path, f"{path} is {size} bytes; kernel and task files are limited to "
                              f"{MAX_SOURCE_CHARS} characters")
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as e:
        raise BundleError(path, f"cannot read {path}: {e.strerror or e}") from None
    if b"\x00" in raw:
        raise BundleError(path, f"{path} is a binary file, not Python source")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BundleError(path, f"{path} is not UTF-8 text: {e}") from None
    if len(text) > MAX_SOURCE_CHARS:
        raise BundleError(path, f"{path} has {len(text)} characters; kernel and task files are limited to "
                          f"{MAX_SOURCE_CHARS}")
    return text


def imported_names(text: str) -> list[str]:
    """Top-level module names ``text`` imports (absolute imports anywhere in the file), in order."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out: list[str] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for n in names:
            top = n.split(".", 1)[0]
            if top not in out:
                out.append(top)
    return out


def safe_name(path: str, taken: Iterable[str] = ()) -> str:
    """A valid module file name for ``path`` (its own when valid), distinct from ``taken``."""
    base = os.path.basename(path)
    stem = base.removesuffix(".py")
    if not _VALID.match(base):
        stem = re.sub(r"[^A-Za-z0-9_]", "_", stem)[:56] or "kernel"
        if not (stem[0].isalpha() or stem[0] == "_"):
            stem = "m_" + stem
    taken = set(taken)
    name, n = f"{stem}.py", 1
    while name in taken:
        name, n = f"{stem[:56]}_{n}.py", n + 1
    return name


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _dirs(path: str, search_path: Sequence[str]) -> list[str]:
    out = [os.path.dirname(os.path.abspath(path))]
    for p in search_path:
        d = os.path.abspath(str(p)) if p else ""
        if d and os.path.isdir(d) and d not in out:
            out.append(d)
    return out


def _closure(roots: Sequence[tuple[str, str]], search_path: Sequence[str], skip: set[str],
             exclude: Sequence[str], limit: int) -> list[tuple[str, str, str]]:
    """(name, path, text) of the sibling modules the ``(path, text)`` roots import, transitively.

    Each root's closure resolves from the root's folder, then ``search_path`` (the process's
    ``sys.path`` when the toolchain loads that file). Names in ``skip`` and files in ``exclude`` are
    not collected."""
    found: list[tuple[str, str, str]] = []
    seen = set(skip)
    for root_path, root_text in roots:
        dirs = _dirs(root_path, search_path)
        todo = [root_text]
        while todo and len(found) < limit:
            for name in imported_names(todo.pop(0)):
                if name in seen or not _MODULE.match(name):
                    continue
                seen.add(name)
                for d in dirs:
                    cand = os.path.join(d, name + ".py")
                    if not os.path.isfile(cand):
                        continue
                    if any(_same(cand, x) for x in exclude):
                        break  # the kernel, the task or a protected file: never sent as a module
                    try:
                        text = read_source(cand)
                    except BundleError:
                        break  # unreadable: the runner's import fails with a clear error
                    found.append((name + ".py", cand, text))
                    todo.append(text)
                    break
                if len(found) >= limit:
                    break
    return found


def dependencies(kernel: str, task: str | None, search_path: Sequence[str] = ()) -> list[str]:
    """Absolute paths of the files one verification of ``kernel`` reads: the kernel, the task and the
    sibling modules they import (for ``nki-agent watch``); unreadable files contribute no imports."""
    roots: list[tuple[str, str]] = []
    paths = [os.path.abspath(kernel)] + ([os.path.abspath(task)] if task and not _same(task, kernel) else [])
    for p in paths:
        try:
            roots.append((p, read_source(p)))
        except BundleError:
            pass
    mods = _closure(roots, search_path, set(), paths, MAX_MODULES)
    return paths + [os.path.abspath(p) for _, p, _ in mods]


@dataclass
class Bundle:
    """The files of one job and where each came from on the client."""

    kernel: SourceFile
    task: SourceFile | None
    modules: list[SourceFile]
    local: dict[str, str] = field(default_factory=dict)  # sent name -> the client's path (as given)


def bundle(kernel: str, task: str, search_path: Sequence[str] = (), protect: Sequence[str] = ()) -> Bundle:
    """Read ``kernel`` and ``task`` (``task`` == ``kernel``: one file) and collect their sibling modules.

    Raises ``BundleError`` when the kernel or the task cannot be read."""
    self_task = _same(kernel, task)
    kernel_text = read_source(kernel)
    task_text = kernel_text if self_task else read_source(task)
    roots = [(kernel, kernel_text)] + ([] if self_task else [(task, task_text)])
    own = {_stem(kernel)} | (set() if self_task else {_stem(task)})
    mods = _closure(roots, search_path, own, [kernel, task, *protect], MAX_MODULES)
    names = {n for n, _, _ in mods}
    k_name = safe_name(kernel, names)
    local = {k_name: kernel}
    t_file = None
    if not self_task:
        t_name = safe_name(task, names | {k_name})
        t_file = SourceFile(name=t_name, text=task_text)
        local[t_name] = task
    for name, path, _ in mods:
        local[name] = path
    return Bundle(SourceFile(name=k_name, text=kernel_text), t_file,
                  [SourceFile(name=n, text=t) for n, _, t in mods], local)


class PathMap:
    """The runner's paths of a job's files → the client's paths (``Location.path``, ``kernel``, ``task``).

    The job folder on the runner is the folder of the result's ``kernel`` (whose file name is the
    kernel's sent name); a path in that folder whose name was sent becomes the client's path. When
    the folder is unknown, a path whose file name was sent and that is not a file here is mapped."""

    def __init__(self, local: dict[str, str], kernel_name: str) -> None:
        self.local = local
        self.kernel_name = kernel_name
        self.folder: str | None = None

    def learn(self, result: JobResult) -> None:
        for p in (result.kernel, result.task):
            if p and os.path.basename(p) == self.kernel_name:
                self.folder = os.path.dirname(p)
                return

    def path(self, p: str) -> str:
        name = os.path.basename(p)
        if name not in self.local:
            return p
        if self.folder is not None:
            return self.local[name] if os.path.dirname(p) == self.folder else p
        return p if os.path.exists(p) else self.local[name]

    def text(self, s: str) -> str:
        if not s or self.folder is None or self.folder not in s:
            return s
        for name, local in self.local.items():
            s = s.replace(os.path.join(self.folder, name), local)
        return s

    def _location(self, loc: Location | None) -> None:
        if loc is not None:
            loc.path = self.path(loc.path)

    def problem(self, p: ProblemInfo) -> None:
        self._location(p.location)
        p.message = self.text(p.message)
        for r in p.related:
            self._location(r.location)
            r.message = self.text(r.message)

    def apply(self, result: JobResult) -> JobResult:
        """Map every path of ``result`` in place (and return it)."""
        self.learn(result)
        result.kernel = self.path(result.kernel) if result.kernel else result.kernel
        result.task = self.path(result.task) if result.task else result.task
        result.stderr = self.text(result.stderr)
        for p in result.problems:
            self.problem(p)
        for s in getattr(result, "seeds", []):
            s.message = self.text(s.message)
        baseline = getattr(result, "baseline", None)
        if baseline is not None:
            self.apply(baseline)
        return result
