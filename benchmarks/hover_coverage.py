"""Hover coverage: the real language server is asked for a hover on every NKI call, every ``nl.*`` /
``nisa.*`` reference and every tile variable of every kernel (and of the helper functions that call NKI)
in a folder of kernel files, and on every kernel parameter; reports the share
of empty hovers and of tile hovers whose shape holds a ``?`` (and of tensor inlay hints holding one).

Default corpus: our own ``examples/`` and the test fixtures' kernels. ``--mirrors DIR`` runs over the
public mirrors under DIR (``aws-neuron+nki-samples``, ``aws-neuron+aws-neuron-sdk``,
``aws-neuron+nki-library``: bare git directories, read with ``git show``; the files are sent to the server
as unsaved buffers, never copied to disk). Hovers are static (no simulation runs): the goal is 0 % empty,
and ``?`` only where a shape depends on a kernel input whose shape is unknown (the report splits the ``?``
hovers into those that come from an input and the others, the ones to fix).

    .venv/bin/python benchmarks/hover_coverage.py [--mirrors DIR] [--small] [--json OUT] [--show N]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
from nki_agent.toolchain.facts import nki_api
from nki_agent.toolchain import source_facts

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lsp_latency import Conn  # noqa: E402  (the benchmarks' shared raw LSP client)

MIRRORS = ("aws-neuron+nki-samples", "aws-neuron+aws-neuron-sdk", "aws-neuron+nki-library")
FIXTURE_DIRS = ("static", "taskless", "broken", "masks", "loop_reduce", "quickfix", "sim_fixes")
MAX_FILE_BYTES = 400_000


@dataclass
class Target:
    path: str
    line: int  # 0-based (LSP)
    character: int  # UTF-16
    kind: str  # call | api | tile | param
    name: str
    from_input: bool = False  # a tile computed from a kernel parameter or a value imported from another module


@dataclass
class Report:
    corpus: str
    files: int = 0
    kernels: int = 0
    requested: dict[str, int] = field(default_factory=dict)
    empty: dict[str, int] = field(default_factory=dict)
    unknown: int = 0  # tile hovers with a ? in the shape
    unknown_from_input: int = 0
    hints: int = 0  # tensor inlay hints shown
    hints_unknown: int = 0  # of which hold a ? in the shape
    examples_empty: list[str] = field(default_factory=list)
    examples_unknown: list[str] = field(default_factory=list)

    def pct_empty(self) -> float:
        n = sum(self.requested.values())
        return 100.0 * sum(self.empty.values()) / n if n else 0.0

    def pct_unknown(self) -> float:
        n = self.requested.get("tile", 0)
        return 100.0 * self.unknown / n if n else 0.0


def _utf16(line: str, byte_col: int) -> int:
    text = line.encode("utf-8")[:byte_col].decode("utf-8", "ignore")
    return len(text.encode("utf-16-le")) // 2


def targets_of(path: str, text: str) -> tuple[list[Target], int]:
    """The hover positions of a file's kernels, and the number of kernels."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [], 0
    aliases = source_facts.import_aliases(tree.body)
    spaces = source_facts.namespaces(aliases)
    generation = source_facts.generation_of_aliases(aliases)
    generation = "new" if generation == "new" else "classic"
    lines = text.split("\n")
    out: list[Target] = []
    imported = {a.asname or a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names} - set(spaces)  # values from other modules (relative imports too)
    kernels = [n for n in ast.walk(tree) if source_facts.is_kernel(n)]

    def api(node: ast.expr) -> tuple[str, str, ast.Attribute] | None:
        parts: list[str] = []
        cur: ast.expr = node
        while isinstance(cur, ast.Attribute):
            parts.append(cur.attr)
            cur = cur.value
        if isinstance(cur, ast.Name) and cur.id in spaces and parts and spaces[cur.id] in ("nl", "nisa"):
            first = node
            while isinstance(first, ast.Attribute) and isinstance(first.value, ast.Attribute):
                first = first.value
            assert isinstance(first, ast.Attribute)
            return spaces[cur.id], parts[-1], first
        return None

    def tileish(e: ast.expr, tiles: set[str]) -> bool:
        """A tile value: an NKI call that returns one, a tile variable, a view of one, or arithmetic on one."""
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute):
            found = api(e.func)
            row = nki_api.row(found[0], found[1]) if found is not None else None
            return row is not None and row.kind == "function" and row.returns_tile(generation)
        if isinstance(e, ast.Name):
            return e.id in tiles
        if isinstance(e, ast.Subscript):
            return tileish(e.value, tiles)
        if isinstance(e, ast.BinOp):
            return tileish(e.left, tiles) or tileish(e.right, tiles)
        return False

    def at(node: ast.AST, kind: str, name: str, col_shift: int = 0, from_input: bool = False) -> Target:
        line = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0) + col_shift
        return Target(path, line - 1, _utf16(lines[line - 1], col), kind, name, from_input)

    inside = {id(n) for k in kernels for n in ast.walk(k) if n is not k}
    helpers = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n not in kernels
               and id(n) not in inside and any(isinstance(x, ast.Name) and x.id in spaces for x in ast.walk(n))]
    helpers = [h for h in helpers if not any(id(h) in {id(x) for x in ast.walk(o) if x is not o} for o in helpers)]
    for fn in kernels + helpers:  # a kernel and the NKI helpers it calls
        assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        params = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
        for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs:
            if fn in kernels:
                out.append(at(a, "param", a.arg))
        tiles: set[str] = set()
        # a shape is unknowable here when it comes from an input or from a value imported from another module
        tainted = set(params) | imported
        seen_api: set[int] = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and id(node) not in seen_api:
                found = api(node)
                if found is not None:
                    ns, name, first = found
                    chain: ast.expr = node
                    while isinstance(chain, ast.Attribute):
                        seen_api.add(id(chain))
                        chain = chain.value
                    # hover on the name after the namespace (``load`` of ``nl.load``)
                    shift = first.end_col_offset - len(first.attr) - first.col_offset \
                        if first.end_col_offset is not None else 0
                    out.append(at(first, "api", f"{ns}.{name}", shift))
        statements = sorted((n for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.For))),
                            key=lambda n: (n.lineno, n.col_offset))  # in source order: facts flow forward
        for stmt in statements:
            if isinstance(stmt, ast.For):  # a loop over something computed from an input
                if {n.id for n in ast.walk(stmt.iter) if isinstance(n, ast.Name)} & tainted:
                    tainted.update(n.id for n in ast.walk(stmt.target) if isinstance(n, ast.Name))
                continue
            if stmt.value is None:
                continue
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names = {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)}
            is_tile = tileish(stmt.value, tiles)
            for t in targets:
                for n in ast.walk(t):  # ``M, N = a.shape``: each name bound from an input is from an input
                    if isinstance(n, ast.Name) and names & tainted:
                        tainted.add(n.id)
                if isinstance(t, ast.Name):
                    if is_tile:
                        tiles.add(t.id)
                        out.append(at(t, "tile", t.id, from_input=bool(names & tainted)))
    for fn in kernels + helpers:  # calls: counted by their api target; mark which api hovers are calls
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and api(node.func) is not None:
                first = api(node.func)[2]  # type: ignore[index]
                for hov in out:
                    if hov.kind == "api" and hov.line == first.lineno - 1 and \
                            hov.character == _utf16(lines[first.lineno - 1], first.end_col_offset - len(first.attr)
                                                    if first.end_col_offset is not None else first.col_offset):
                        hov.kind = "call"
    return out, len(kernels)


class Server(Conn):
    """``python -m nki_agent.server`` over stdio (``lsp_latency.Conn``), initialised on ``workspace``."""

    def __init__(self, workspace: Path) -> None:
        super().__init__([sys.executable, "-m", "nki_agent.server"], env=dict(os.environ, NKI_AGENT_CHECK_HELPER="0"),
                         cwd=ROOT)
        self.request("initialize", {"capabilities": {}, "rootUri": workspace.as_uri(),
                                    "initializationOptions": {"simulateOnSave": False}}, timeout=120)
        self.notify("initialized", {})

    def request(self, method: str, params: Any, timeout: float = 120) -> dict[str, Any]:
        return super().request(method, params, timeout)

    def close(self) -> None:
        try:
            self.request("shutdown", None, timeout=20)
            self.notify("exit", None)
            self.proc.wait(20)
        except Exception:  # noqa: BLE001 - a stuck server is killed
            self.proc.kill()


def shape_unknown(md: str) -> bool:
    for line in md.split("\n"):
        if line.startswith("| shape |"):
            return "?" in line or "unknown" in line
    return "shape `?`" in md or "shape known after" in md


def measure(server: Server, corpus: str, files: list[tuple[str, str]], workspace: Path, show: int) -> Report:
    rep = Report(corpus)
    for k, (name, text) in enumerate(files):
        targets, kernels = targets_of(name, text)
        if not kernels:
            continue
        rep.files += 1
        rep.kernels += kernels
        uri = (workspace / f"f{k}" / os.path.basename(name)).as_uri()
        server.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                                "text": text}})
        for t in targets:
            rep.requested[t.kind] = rep.requested.get(t.kind, 0) + 1
            res = server.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                        "position": {"line": t.line, "character": t.character}})
            result = res.get("result") or {}
            md = (result.get("contents") or {}).get("value", "") if isinstance(result, dict) else ""
            where = f"{name}:{t.line + 1}: {t.kind} {t.name}"
            if not md.strip():
                rep.empty[t.kind] = rep.empty.get(t.kind, 0) + 1
                if len(rep.examples_empty) < show:
                    rep.examples_empty.append(where)
            elif t.kind == "tile" and shape_unknown(md):
                rep.unknown += 1
                rep.unknown_from_input += t.from_input
                if not t.from_input and len(rep.examples_unknown) < show:
                    rep.examples_unknown.append(where)
        res = server.request("textDocument/inlayHint", {"textDocument": {"uri": uri}, "range": {
            "start": {"line": 0, "character": 0}, "end": {"line": text.count("\n") + 1, "character": 0}}})
        for h in res.get("result") or []:
            label = h.get("label") if isinstance(h.get("label"), str) else ""
            if h.get("kind") == 1 and label.startswith(": "):  # a tensor's type hint (loops are Parameter hints)
                rep.hints += 1
                rep.hints_unknown += "?" in label
        server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    return rep


def own_files(small: bool) -> list[tuple[str, str]]:
    paths = sorted((ROOT / "examples").rglob("*.py"))
    for d in FIXTURE_DIRS:
        paths += sorted((ROOT / "tests" / "fixtures" / d).rglob("*.py"))
    files = [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8", errors="replace")) for p in paths
             if p.stat().st_size <= MAX_FILE_BYTES]
    files = [(n, t) for n, t in files if source_facts.has_kernel(t)]
    return files[:6] if small else files


def mirror_files(root: Path, small: bool) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name in MIRRORS:
        git = root / name / "repo"
        if not git.exists():
            continue
        listed = subprocess.run(["git", "-C", str(git), "ls-tree", "-r", "--name-only", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.split("\n")
        for path in sorted(p for p in listed if p.endswith(".py")):
            text = subprocess.run(["git", "-C", str(git), "show", f"HEAD:{path}"], capture_output=True, check=False,
                                  ).stdout.decode("utf-8", "replace")
            if len(text) <= MAX_FILE_BYTES and source_facts.has_kernel(text) and source_facts.generation_of_source(text):
                out.append((f"{name}:{path}", text))
            if small and len(out) >= 4:
                return out
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirrors", type=Path, help="folder holding the public mirrors (owner+name/repo)")
    ap.add_argument("--small", action="store_true", help="a few files only (the test's mode)")
    ap.add_argument("--json", type=Path, help="write the report(s) as JSON here")
    ap.add_argument("--show", type=int, default=10, help="list up to N empty / unexplained-? hovers")
    args = ap.parse_args(argv)
    corpora = [("ours (examples + fixtures)", own_files(args.small))]
    if args.mirrors:
        corpora.append(("public mirrors", mirror_files(args.mirrors, args.small)))
    reports = []
    with tempfile.TemporaryDirectory(prefix="nki-hover-cov-") as tmp:
        workspace = Path(tmp)
        server = Server(workspace)
        try:
            for label, files in corpora:
                reports.append(measure(server, label, files, workspace, args.show))
        finally:
            server.close()
    for rep in reports:
        n = sum(rep.requested.values())
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(rep.requested.items()))
        print(f"{rep.corpus}: {rep.files} files, {rep.kernels} kernels, {n} hovers ({kinds})")
        print(f"  empty: {sum(rep.empty.values())} ({rep.pct_empty():.1f} %)"
              + (f" — {', '.join(f'{k} {v}' for k, v in sorted(rep.empty.items()))}" if rep.empty else ""))
        print(f"  tile hovers with ? in the shape: {rep.unknown} of {rep.requested.get('tile', 0)} "
              f"({rep.pct_unknown():.1f} %), {rep.unknown_from_input} computed from a kernel input of unknown shape or an imported value")
        print(f"  tensor inlay hints with ? in the shape: {rep.hints_unknown} of {rep.hints}")
        for e in rep.examples_empty:
            print(f"    empty: {e}")
        for e in rep.examples_unknown:
            print(f"    ? not from an input: {e}")
    print("goal: 0 % empty; ? only where a shape depends on an input with no known shape")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) | {"pct_empty": r.pct_empty(), "pct_unknown": r.pct_unknown()}
                                         for r in reports], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
