"""What a client sends a runner for one kernel: its files (kernel, task, sibling modules), and the way back.

``bundle`` reads the kernel and the task (a kernel that is its own task is sent once, ``task=None`` in
the request) and collects the sibling modules each imports, so a kernel split over ``kernel.py`` +
``helpers.py`` runs remotely as it does locally. Imports are read with ``ast`` (a file that does not
parse contributes none); a module is sent when it is a top-level ``NAME.py`` in the importing file's
own folder or in a ``search_path`` folder (that order, as ``tasks.search_dirs``), transitively, at
most ``protocol.MAX_MODULES`` per bundle; packages, the standard library and installed packages are the
runner's own. The kernel's modules (``modules``) and the task's (``task_modules``) are two bundles: the
runner writes them into two folders (``layout.py``), so each file imports what it imports locally. A
kernel module that would shadow a task import or an installed module is refused here already
(``BundleError``, the check of ``layout.shadowing``), as the runner would refuse it. Files named in
``protect`` are never sent (the agent's protected originals). A kernel or task whose file name is not
a valid module name (``my-kernel.py``, ``1st.py``) or is an installed module's (``profile.py``) is sent
under a safe one.

``PathMap`` turns the runner's paths in a result (its job folders) back into the client's own paths.
``dependencies`` is the same closure as local paths, for ``nki-agent watch``.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from nki_agent.toolchain.protocol.jobs import (
    MAX_MODULES,
    MAX_SOURCE_CHARS,
    JobResult,
    Location,
    ProblemInfo,
    SourceFile,
)

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
    from .layout import installed

    base = os.path.basename(path)
    stem = base.removesuffix(".py")
    if _VALID.match(base) and installed(stem):
        stem = stem[:56] + "_"
    elif not _VALID.match(base):
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
    paths = [os.path.abspath(kernel)] + ([os.path.abspath(task)] if task and not _same(task, kernel) else [])
    out = list(paths)
    for p in paths:
        try:
            root = (p, read_source(p))
        except BundleError:
            continue
        for _, m, _ in _closure([root], search_path, set(), paths, MAX_MODULES):
            if os.path.abspath(m) not in out:
                out.append(os.path.abspath(m))
    return out


@dataclass
class Bundle:
    """The files of one job and where each came from on the client: ``local`` for the kernel's bundle
    (the runner's kernel folder), ``task_local`` for the task's (its task folder)."""

    kernel: SourceFile
    task: SourceFile | None
    modules: list[SourceFile]
    local: dict[str, str] = field(default_factory=dict)  # sent name -> the client's path (as given)
    task_modules: list[SourceFile] = field(default_factory=list)
    task_local: dict[str, str] = field(default_factory=dict)

    def path_map(self) -> PathMap:
        return PathMap(self.local, self.kernel.name, self.task_local, self.task.name if self.task else None)


def bundle(kernel: str, task: str, search_path: Sequence[str] = (), protect: Sequence[str] = ()) -> Bundle:
    """Read ``kernel`` and ``task`` (``task`` == ``kernel``: one file) and collect each one's sibling modules.

    Raises ``BundleError`` when the kernel or the task cannot be read, or when a module of the
    kernel's bundle shadows a module the task imports or an installed one (the runner refuses those)."""
    from .layout import shadowing

    self_task = _same(kernel, task)
    kernel_text = read_source(kernel)
    task_text = kernel_text if self_task else read_source(task)
    own = {_stem(kernel)} | (set() if self_task else {_stem(task)})
    exclude = [kernel, task, *protect]
    mods = _closure([(kernel, kernel_text)], search_path, own, exclude, MAX_MODULES)
    k_name = safe_name(kernel, {n for n, _, _ in mods})
    local = {k_name: kernel, **{name: path for name, path, _ in mods}}
    k_files = [SourceFile(name=k_name, text=kernel_text)] + [SourceFile(name=n, text=t) for n, _, t in mods]
    t_file: SourceFile | None = None
    t_mods: list[tuple[str, str, str]] = []
    task_local: dict[str, str] = {}
    if not self_task:
        t_mods = _closure([(task, task_text)], search_path, own, exclude, MAX_MODULES)
        t_name = safe_name(task, {n for n, _, _ in t_mods})
        t_file = SourceFile(name=t_name, text=task_text)
        task_local = {t_name: task, **{name: path for name, path, _ in t_mods}}
    t_files = ([t_file] if t_file else []) + [SourceFile(name=n, text=t) for n, _, t in t_mods]
    found = shadowing(k_files, t_files)
    if found is not None:
        raise BundleError(local[found[0] + ".py"], found[1])
    return Bundle(k_files[0], t_file, k_files[1:], local, t_files[1:], task_local)


class PathMap:
    """The runner's paths of a job's files → the client's paths (``Location.path``, ``kernel``, ``task``).

    The runner's kernel folder is the folder of the result's ``kernel`` (whose file name is the
    kernel's sent name), its task folder the folder of the result's ``task``; a path in one of them
    whose name was sent in that bundle becomes the client's path. When the folders are unknown, a path
    whose file name was sent and that is not a file here is mapped (the kernel's bundle first)."""

    def __init__(self, local: dict[str, str], kernel_name: str, task_local: dict[str, str] | None = None,
                 task_name: str | None = None) -> None:
        self.local = local
        self.kernel_name = kernel_name
        self.task_local = task_local or {}
        self.task_name = task_name
        self.folder: str | None = None
        self.task_folder: str | None = None

    def learn(self, result: JobResult) -> None:
        for p in (result.kernel, result.task):
            if not p:
                continue
            if self.folder is None and os.path.basename(p) == self.kernel_name:
                self.folder = os.path.dirname(p)
            elif self.task_name and os.path.basename(p) == self.task_name:
                self.task_folder = os.path.dirname(p)
        if result.task and result.kernel and result.task == result.kernel:
            self.task_folder = None

    def _folders(self) -> list[tuple[str, dict[str, str]]]:
        return [(f, m) for f, m in ((self.folder, self.local), (self.task_folder, self.task_local)) if f is not None]

    def path(self, p: str) -> str:
        name, folder = os.path.basename(p), os.path.dirname(p)
        known = self._folders()
        if known:
            for f, names in known:
                if folder == f and name in names:
                    return names[name]
            return p
        for names in (self.local, self.task_local):
            if name in names:
                return p if os.path.exists(p) else names[name]
        return p

    def text(self, s: str) -> str:
        for folder, names in self._folders():
            if not s or folder not in s:
                continue
            for name, local in names.items():
                s = s.replace(os.path.join(folder, name), local)
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
