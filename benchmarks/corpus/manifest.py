"""Corpus data model and sources: the manifest rows, per-row plans and results, and the bare git mirrors.

Owns ``Row`` (one ``kernel-corpus.tsv`` line), ``Plan`` (what to extract and run for a row),
``Result`` (one row's outcome, serialised as-is into the results JSON), ``read_manifest`` and
``Mirrors`` (read-only, cached ``git ls-tree`` / ``git show`` against local bare clones).
"""

from __future__ import annotations

import csv
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

# Every outcome a row can get, in report column order (meanings in README.md).
OUTCOMES = (
    "pass", "mismatch", "ran", "sim_error", "unsupported", "import_error", "crash", "no_entry", "timeout",
)


@dataclass(frozen=True)
class Row:
    """One manifest row (a kernel source file at a commit)."""

    repo: str
    commit: str
    path: str
    api: str
    kernel_functions: str
    has_reference_test: str
    framework_ref: str
    self_contained: str
    notes: str
    ref_kind: str

    @property
    def key(self) -> str:
        return f"{self.repo}@{self.commit[:8]}:{self.path}"


@dataclass
class Plan:
    """What to extract and how to run one row."""

    entry_kind: str  # sdk_unittest | pytest | script | autocomp_harness | nkibench_driver | none
    entry: str = ""  # path inside the temp tree of the file to run
    check: str = "none"  # where the reference check lives: self | test | harness | reference-module | none
    command: list[str] = field(default_factory=list)  # after "python -m nki_agent.toolchain.shim"
    files: set[tuple[str, str, str, str]] = field(default_factory=set)  # (repo, commit, src, dest)
    generated: dict[str, str] = field(default_factory=dict)  # dest -> text
    pythonpath: list[str] = field(default_factory=list)  # temp-tree relative roots
    reason: str = ""


@dataclass
class Result:
    """The outcome of one row."""

    repo: str
    commit: str
    path: str
    api: str
    entry_kind: str
    entry: str
    check: str
    outcome: str
    detail: str = ""
    nki_code: str | None = None
    nki_message: str | None = None
    nki_line: str | None = None
    missing_api: str | None = None
    missing_module: str | None = None
    exception: str | None = None
    crash_site: str | None = None
    tests: dict[str, int] = field(default_factory=dict)
    returncode: int | None = None
    seconds: float = 0.0
    probe: str | None = None
    post_check_error: str | None = None
    detail_where: str | None = None
    command: str = ""
    output_tail: str = ""


def read_manifest(path: Path) -> list[Row]:
    """Read the TSV manifest into rows."""
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh, delimiter="\t")
        return [
            Row(
                repo=r["repo"], commit=r["commit"], path=r["path"], api=r.get("api", ""),
                kernel_functions=r.get("kernel_functions", ""),
                has_reference_test=r.get("has_reference_test", ""),
                framework_ref=r.get("framework_ref", ""), self_contained=r.get("self_contained", ""),
                notes=r.get("notes", ""), ref_kind=r.get("ref_kind", ""),
            )
            for r in reader
        ]


class Mirrors:
    """Read-only access to bare git mirrors (``DIR/owner+name/repo``, ``DIR/owner+name`` or ``DIR/owner/name``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._trees: dict[tuple[str, str], frozenset[str]] = {}
        self._blobs: dict[tuple[str, str, str], bytes | None] = {}
        self._lock = threading.Lock()

    def git_dir(self, repo: str) -> Path | None:
        owner, name = repo.split("/", 1)
        for cand in (self.root / f"{owner}+{name}" / "repo", self.root / f"{owner}+{name}",
                     self.root / owner / name, self.root / owner / f"{name}.git"):
            if (cand / "HEAD").exists() and ((cand / "objects").exists() or (cand / ".git").exists()):
                return cand
            if (cand / ".git" / "HEAD").exists():
                return cand / ".git"
        return None

    def _git(self, repo: str, *args: str) -> bytes:
        gd = self.git_dir(repo)
        if gd is None:
            raise FileNotFoundError(f"no mirror for {repo} under {self.root}")
        return subprocess.run(["git", f"--git-dir={gd}", *args], check=True, capture_output=True).stdout

    def has_commit(self, repo: str, commit: str) -> bool:
        try:
            self._git(repo, "cat-file", "-e", f"{commit}^{{commit}}")
            return True
        except (subprocess.CalledProcessError, FileNotFoundError):
            return False

    def tree(self, repo: str, commit: str) -> frozenset[str]:
        key = (repo, commit)
        with self._lock:
            if key in self._trees:
                return self._trees[key]
        out = self._git(repo, "ls-tree", "-r", "--name-only", "-z", commit)
        paths = frozenset(p for p in out.decode().split("\0") if p)
        with self._lock:
            self._trees[key] = paths
        return paths

    def read(self, repo: str, commit: str, path: str) -> bytes | None:
        key = (repo, commit, path)
        with self._lock:
            if key in self._blobs:
                return self._blobs[key]
        try:
            data: bytes | None = self._git(repo, "show", f"{commit}:{path}")
        except subprocess.CalledProcessError:
            data = None
        with self._lock:
            self._blobs[key] = data
        return data

    def text(self, repo: str, commit: str, path: str) -> str:
        data = self.read(repo, commit, path)
        return data.decode("utf-8", errors="replace") if data is not None else ""
