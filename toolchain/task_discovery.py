"""Task discovery: which task module a kernel is simulated, verified and repaired against.

In order (the first that names an existing file wins; explicit beats implicit):

1. a ``# nki-task: relative/path.py`` comment in the kernel's buffer, relative to the kernel's folder;
2. the ``nkiAgent.taskMap`` setting: ``{"glob": "task path"}``, globs matched against the kernel path
   relative to the workspace root (or absolute), task paths relative to the workspace root;
3. the kernel file itself, when it defines ``get_inputs`` (kernel and task in one file);
4. a sibling ``task.py`` in the kernel's folder.

The task is the user's file on disk; only the kernel comes from the open buffer.
"""

from __future__ import annotations

import fnmatch
import os
import re
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


def missing_task(kernel_path: str, text: str) -> MissingTask | None:
    """The ``# nki-task:`` comment of ``text`` when the file it names is not there (a typo says so)."""
    m = _COMMENT.search(text)
    if not m:
        return None
    folder = os.path.dirname(os.path.abspath(kernel_path))
    cand = os.path.normpath(os.path.join(folder, m.group(1)))
    if os.path.isfile(cand):
        return None
    line = text.count("\n", 0, m.start(1)) + 1
    column = m.start(1) - (text.rfind("\n", 0, m.start(1)) + 1) + 1
    return MissingTask(line, column, m.group(1), cand)


def discover(kernel_path: str, text: str, task_map: dict[str, str], root: str | None) -> TaskRef | None:
    """The task of the kernel at ``kernel_path`` whose buffer is ``text``, or None."""
    folder = os.path.dirname(os.path.abspath(kernel_path))
    m = _COMMENT.search(text)
    if m:
        cand = os.path.normpath(os.path.join(folder, m.group(1)))
        if os.path.isfile(cand):
            return TaskRef(cand, "comment")
    if task_map:
        rel = os.path.relpath(kernel_path, root) if root else kernel_path
        for pattern, task in task_map.items():
            if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(kernel_path, pattern):
                cand = os.path.normpath(os.path.join(root or folder, task))
                if os.path.isfile(cand):
                    return TaskRef(cand, "taskMap")
    if _GET_INPUTS.search(text):
        return TaskRef(SELF, "self")
    sibling = os.path.join(folder, "task.py")
    if os.path.isfile(sibling) and os.path.abspath(kernel_path) != sibling:
        return TaskRef(sibling, "sibling")
    return None
