"""Task discovery: which task module a kernel is simulated, verified and repaired against.

In order (the first that names an existing file wins; explicit beats implicit):

1. a ``# nki-task: relative/path.py`` comment in the kernel's buffer, relative to the kernel's folder;
2. the ``nkiAgent.taskMap`` setting: ``{"glob": "task path"}``, globs matched against the kernel path
   relative to the workspace root (or absolute), task paths relative to the workspace root;
3. the kernel file itself, when it defines ``get_inputs`` (kernel and task in one file);
4. a sibling ``task.py`` in the kernel's folder.

The task is the user's file on disk; only the kernel comes from the open buffer.

Containment (the language server passes ``roots``, its workspace folders): a task named by a comment or
by ``taskMap``, and a sibling ``task.py``, is used only when its real path (symlinks resolved) lies inside
one of ``roots``; anything else is ignored and reported by ``outside_task`` (a cloned repository's
``# nki-task: /home/you/secret.py`` must never be read, simulated or sent to a runner). ``roots=None``
(the command line, where the user names the kernel) applies no containment.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

_COMMENT = re.compile(r"^\s*#\s*nki-task:\s*(\S+)", re.MULTILINE)
_GET_INPUTS = re.compile(r"^def get_inputs\s*\(", re.MULTILINE)
SELF = "<self>"  # the kernel buffer is its own task


@dataclass(frozen=True)
class TaskRef:
    path: str  # a task file on disk, or SELF
    how: str  # comment | taskMap | self | sibling


@dataclass(frozen=True)
class MissingTask:
    """A ``# nki-task:`` comment naming a file that does not exist."""

    line: int  # 1-based line of the comment
    column: int  # 1-based column of the path in it
    written: str  # the path as written
    looked_for: str  # where it was looked for (relative to the kernel's folder)


@dataclass(frozen=True)
class OutsideTask:
    """A task named by ``# nki-task:`` or ``taskMap`` (or a sibling ``task.py`` link) outside the workspace."""

    how: str  # comment | taskMap | sibling
    written: str  # the path as written (the comment's, the taskMap value, or the sibling's path)
    real: str  # where it really is (symlinks resolved)
    line: int = 0  # 1-based line of the comment (0: not a comment)
    column: int = 0  # 1-based column of the path in it


def inside(path: str, roots: Sequence[str]) -> bool:
    """Whether the real path of ``path`` (symlinks resolved) is one of ``roots`` or below one (real paths too)."""
    real = os.path.realpath(path)
    for root in roots:
        r = os.path.realpath(root)
        if real == r or real.startswith(r.rstrip(os.sep) + os.sep):
            return True
    return False


def _comment_at(text: str, m: re.Match[str]) -> tuple[int, int]:
    line = text.count("\n", 0, m.start(1)) + 1
    column = m.start(1) - (text.rfind("\n", 0, m.start(1)) + 1) + 1
    return line, column


def _candidates(kernel_path: str, text: str, task_map: dict[str, str],
                root: str | None) -> list[tuple[str, str, str, re.Match[str] | None]]:
    """(how, written, path) of every explicit and implicit task file, in discovery order (not checked)."""
    folder = os.path.dirname(os.path.abspath(kernel_path))
    out: list[tuple[str, str, str, re.Match[str] | None]] = []
    m = _COMMENT.search(text)
    if m:
        out.append(("comment", m.group(1), os.path.normpath(os.path.join(folder, m.group(1))), m))
    if task_map:
        rel = os.path.relpath(kernel_path, root) if root else kernel_path
        for pattern, task in task_map.items():
            if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(kernel_path, pattern):
                out.append(("taskMap", task, os.path.normpath(os.path.join(root or folder, task)), None))
    return out


def outside_task(kernel_path: str, text: str, task_map: dict[str, str], root: str | None,
                 roots: Sequence[str]) -> OutsideTask | None:
    """The first task file ``discover`` ignored because it lies outside ``roots`` (None: nothing ignored)."""
    found = _candidates(kernel_path, text, task_map, root)
    sibling = os.path.join(os.path.dirname(os.path.abspath(kernel_path)), "task.py")
    if not _GET_INPUTS.search(text):
        found.append(("sibling", sibling, sibling, None))
    for how, written, cand, m in found:
        if not os.path.isfile(cand):
            continue
        if inside(cand, roots):
            return None  # discover uses this one
        line, column = _comment_at(text, m) if m else (0, 0)
        return OutsideTask(how, written, os.path.realpath(cand), line, column)
    return None


def missing_task(kernel_path: str, text: str) -> MissingTask | None:
    """The ``# nki-task:`` comment of ``text`` when the file it names is not there (a typo says so)."""
    m = _COMMENT.search(text)
    if not m:
        return None
    folder = os.path.dirname(os.path.abspath(kernel_path))
    cand = os.path.normpath(os.path.join(folder, m.group(1)))
    if os.path.isfile(cand):
        return None
    line, column = _comment_at(text, m)
    return MissingTask(line, column, m.group(1), cand)


def discover(kernel_path: str, text: str, task_map: dict[str, str], root: str | None,
             roots: Sequence[str] | None = None) -> TaskRef | None:
    """The task of the kernel at ``kernel_path`` whose buffer is ``text``, or None. With ``roots``, a task
    file outside them (real path) is skipped as if it did not exist (``outside_task`` says which)."""
    ok = (lambda p: os.path.isfile(p)) if roots is None else (lambda p: os.path.isfile(p) and inside(p, roots))
    for how, _, cand, _ in _candidates(kernel_path, text, task_map, root):
        if ok(cand):
            return TaskRef(os.path.realpath(cand) if roots is not None else cand, how)
    if _GET_INPUTS.search(text):
        return TaskRef(SELF, "self")
    folder = os.path.dirname(os.path.abspath(kernel_path))
    sibling = os.path.join(folder, "task.py")
    if ok(sibling) and os.path.abspath(kernel_path) != sibling:
        return TaskRef(os.path.realpath(sibling) if roots is not None else sibling, "sibling")
    return None
