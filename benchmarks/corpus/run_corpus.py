#!/usr/bin/env python3
"""Run the public NKI kernel corpus through the embedded simulator and report what happens.

The corpus (``kernel-corpus.tsv``) lists third-party kernel files by (repo, commit, path). Their code
is never stored in this repository: for every row this script reads the file (plus the tests that
check it and the in-repo modules they import) from local bare git mirrors, writes them into a fresh
temporary tree that mirrors the repo layout, and runs the best standalone entry point in a
subprocess through the import shim::

    python -m nki_agent.toolchain.shim FILE                 # like ``python FILE``
    python -m nki_agent.toolchain.shim -m pytest FILE -x -q  # pytest in shim mode

Each row gets one outcome (see README.md): pass, mismatch, ran, sim_error, unsupported,
import_error, crash, no_entry, timeout.

This module owns running rows (materialise the plan into a temp tree, run it with a timeout that
kills the process group), the aggregate report (JSON summary, markdown, console table) and the CLI.
The rest lives in sibling modules: ``manifest.py`` (rows, plans, results, mirrors), ``closure.py``
(import closure), ``plan.py`` (entry choice, generated drivers), ``classify.py`` (outcomes).

Usage::

    NKI_CORPUS_MIRRORS=/path/to/mirrors python benchmarks/corpus/run_corpus.py --out results.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path, PurePosixPath
from typing import Any

# The sibling modules are imported by bare name (this folder is not a package): running the file as a
# script puts its folder first on sys.path; make sure of it also under ``python -P`` or ``runpy``.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from classify import classify
from manifest import OUTCOMES, Mirrors, Plan, Result, Row, read_manifest
from plan import note_commits, plan_probe, plan_row

REPO_ROOT = Path(__file__).resolve().parents[2]
# The manifest lives in the shared docs checkout next to the repo (../shared/docs).
DEFAULT_MANIFEST = REPO_ROOT.parent / "shared" / "docs" / "kernel-corpus.tsv"
MIRRORS_ENV = "NKI_CORPUS_MIRRORS"
# Non-Python files above this size are not extracted (datasets, checkpoints; tests rarely need them).
MAX_DATA_FILE_BYTES = 2_000_000


# --------------------------------------------------------------------------------------------------
# Materialise and run
# --------------------------------------------------------------------------------------------------


def materialise(mirrors: Mirrors, plan: Plan, dest: Path) -> None:
    """Write the plan's files into ``dest`` (a temp tree mirroring the repo layout)."""
    for repo, commit, src, rel in sorted(plan.files):
        data = mirrors.read(repo, commit, src)
        if data is None:
            continue
        if len(data) > MAX_DATA_FILE_BYTES and not src.endswith(".py"):
            continue
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    for rel, text in plan.generated.items():
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)


def run_subprocess(
    python: str, args: list[str], cwd: Path, pythonpath: list[Path], timeout: float
) -> tuple[int | None, str, str, bool, float]:
    """Run ``python -m nki_agent.toolchain.shim ARGS``; returns (rc, stdout, stderr, timed_out, secs)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in pythonpath), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    env.update(PYTHONDONTWRITEBYTECODE="1", MPLBACKEND="Agg", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONHASHSEED="0", PYTHONUNBUFFERED="1")
    t0 = time.monotonic()
    proc = subprocess.Popen([python, "-m", "nki_agent.toolchain.shim", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        timed_out = True
    return (None if timed_out else proc.returncode, out.decode(errors="replace"),
            err.decode(errors="replace"), timed_out, time.monotonic() - t0)


def run_row(mirrors: Mirrors, row: Row, python: str, timeout: float, keep: Path | None) -> Result:
    """Plan, extract, run and classify one row."""
    try:
        plan = plan_row(mirrors, row)
    except Exception as exc:  # planning must never kill the whole run
        return base_result(row, Plan(entry_kind="none"), "crash", detail=f"harness planning failed: {exc!r}")
    tmp = Path(tempfile.mkdtemp(prefix="nki-corpus-"))
    try:
        if plan.entry_kind == "none":
            plan.generated["_corpus_probe.py"] = plan_probe(row, plan, mirrors)
            materialise(mirrors, plan, tmp)
            rc, out, err, to, secs = run_subprocess(python, ["_corpus_probe.py"], tmp, [tmp], timeout)
            res = base_result(row, plan, "no_entry", detail=plan.reason)
            probe = classify(plan, rc, out, err, to, tmp)
            res.probe = "import_ok" if rc == 0 else f"{probe.outcome}: {probe.detail}"
            res.missing_api = probe.missing_api if rc else None
            res.missing_module = probe.missing_module if rc else None
            res.seconds = secs
            return res
        materialise(mirrors, plan, tmp)
        cwd = tmp / PurePosixPath(plan.entry).parent
        paths = [tmp, *(tmp / p for p in plan.pythonpath)]
        command = [str(tmp / a) if (tmp / a).is_file() else a for a in plan.command]
        rc, out, err, to, secs = run_subprocess(python, command, cwd, paths, timeout)
        res = classify(plan, rc, out, err, to, tmp)
        fill_row(res, row, plan)
        res.seconds = round(secs, 2)
        res.returncode = rc
        res.command = "python -m nki_agent.toolchain.shim " + " ".join(plan.command)
        res.output_tail = tail(err if err.strip() else out, 2500).replace(str(tmp) + "/", "")
        return res
    finally:
        if keep is not None:
            target = keep / row.key.replace("/", "+").replace(":", "+")
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(tmp, target)
        shutil.rmtree(tmp, ignore_errors=True)


def base_result(row: Row, plan: Plan, outcome: str, detail: str = "") -> Result:
    res = Result(repo=row.repo, commit=row.commit, path=row.path, api=row.api, entry_kind=plan.entry_kind,
                 entry=plan.entry, check=plan.check, outcome=outcome, detail=detail)
    return res


def fill_row(res: Result, row: Row, plan: Plan) -> None:
    res.repo, res.commit, res.path, res.api = row.repo, row.commit, row.path, row.api
    res.entry_kind, res.entry, res.check = plan.entry_kind, plan.entry, plan.check


def tail(text: str, n: int) -> str:
    return text if len(text) <= n else "…" + text[-n:]


# --------------------------------------------------------------------------------------------------
# Aggregation and reporting
# --------------------------------------------------------------------------------------------------


def aggregate(results: list[Result]) -> dict[str, Any]:
    by_repo: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for r in results:
        by_repo[r.repo][r.outcome] += 1
    total = collections.Counter(r.outcome for r in results)
    missing = collections.Counter(r.missing_api for r in results if r.missing_api and r.outcome == "unsupported")
    probe_missing = collections.Counter(r.missing_api for r in results if r.missing_api and r.outcome == "no_entry")
    codes = collections.Counter(r.nki_code for r in results if r.nki_code)
    modules = collections.Counter(r.missing_module for r in results if r.missing_module)
    crashes = collections.Counter((r.exception or r.detail).split(":")[0] for r in results if r.outcome == "crash")
    return {
        "total": dict(total),
        "rows": len(results),
        "by_repo": {k: dict(v) for k, v in sorted(by_repo.items())},
        "top_missing_apis": missing.most_common(25),
        "top_missing_apis_in_import_probes": probe_missing.most_common(15),
        "top_error_codes": codes.most_common(25),
        "top_missing_modules": modules.most_common(15),
        "top_crash_exceptions": crashes.most_common(15),
    }


def markdown_table(summary: dict[str, Any]) -> str:
    cols = list(OUTCOMES)
    lines = ["| repo | " + " | ".join(cols) + " | total |", "|---|" + "---|" * (len(cols) + 1)]
    for repo, counts in summary["by_repo"].items():
        lines.append(f"| {repo} | " + " | ".join(str(counts.get(c, "")) for c in cols)
                     + f" | {sum(counts.values())} |")
    tot = summary["total"]
    lines.append("| **total** | " + " | ".join(f"**{tot.get(c, 0)}**" for c in cols) + f" | **{summary['rows']}** |")
    out = ["\n".join(lines)]
    for key, title in (("top_missing_apis", "Top missing APIs"), ("top_error_codes", "Top NKI error codes"),
                       ("top_missing_modules", "Top missing modules (import_error)"),
                       ("top_crash_exceptions", "Top crash exceptions"),
                       ("top_missing_apis_in_import_probes", "Missing APIs seen by no_entry import probes")):
        if summary[key]:
            out.append(f"\n**{title}:** " + ", ".join(f"`{k}` ×{n}" for k, n in summary[key]))
    return "\n".join(out)


def print_report(summary: dict[str, Any]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(markdown_table(summary))
        return
    table = Table(title="NKI corpus through the embedded simulator")
    table.add_column("repo")
    for c in (*OUTCOMES, "total"):
        table.add_column(c, justify="right")
    for repo, counts in summary["by_repo"].items():
        table.add_row(repo, *(str(counts.get(c, "")) for c in OUTCOMES), str(sum(counts.values())))
    table.add_row("total", *(str(summary["total"].get(c, 0)) for c in OUTCOMES), str(summary["rows"]), style="bold")
    console = Console(width=200)
    console.print(table)
    for key in ("top_missing_apis", "top_error_codes", "top_missing_modules", "top_crash_exceptions",
                "top_missing_apis_in_import_probes"):
        if summary[key]:
            console.print(f"[bold]{key}[/bold]: " + ", ".join(f"{k} ×{n}" for k, n in summary[key]))


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mirrors", type=Path, default=os.environ.get(MIRRORS_ENV),
                   help=f"directory of bare git mirrors (or env {MIRRORS_ENV})")
    p.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST, help="kernel-corpus.tsv")
    p.add_argument("--out", type=Path, default=Path("results.json"), help="results JSON path")
    p.add_argument("--markdown", type=Path, default=None, help="also write the summary as markdown")
    p.add_argument("--filter", default="", help="only rows whose repo (or repo:path) contains this substring")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per row")
    p.add_argument("--jobs", type=int, default=2, help="concurrent subprocesses (default 2)")
    p.add_argument("--python", default=sys.executable, help="interpreter that has nki_agent installed")
    p.add_argument("--keep", type=Path, default=None, help="copy each row's temp tree here (debugging)")
    p.add_argument("--merge", type=Path, default=None,
                   help="previous results JSON: keep its rows that this run does not re-run, write the union")
    p.add_argument("--plan-only", action="store_true", help="print the chosen entry per row; run nothing")
    args = p.parse_args(argv)
    if not args.mirrors:
        p.error(f"--mirrors DIR (or env {MIRRORS_ENV}) is required")
    return args


def select_rows(rows: list[Row], needle: str) -> list[Row]:
    if not needle:
        return rows
    return [r for r in rows if needle in r.repo or needle in f"{r.repo}:{r.path}"]


def check_mirrors(mirrors: Mirrors, rows: list[Row]) -> list[str]:
    """Problems with the mirrors (missing repo or commit) for the selected rows."""
    problems = []
    for repo, commit in sorted({(r.repo, r.commit) for r in rows}):
        if mirrors.git_dir(repo) is None:
            problems.append(f"missing mirror: {repo}")
        elif not mirrors.has_commit(repo, commit):
            problems.append(f"missing commit: {repo}@{commit}")
    return problems


def run_all(mirrors: Mirrors, rows: list[Row], args: argparse.Namespace) -> list[Result]:
    results: list[Result] = []
    usable = {(r.repo, r.commit) for r in rows if mirrors.git_dir(r.repo) and mirrors.has_commit(r.repo, r.commit)}
    todo = []
    for row in rows:
        if (row.repo, row.commit) not in usable:
            results.append(base_result(row, Plan(entry_kind="none"), "no_entry", detail="mirror/commit unavailable"))
        else:
            todo.append(row)
    done = 0
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futs = {pool.submit(run_row, mirrors, row, args.python, args.timeout, args.keep): row for row in todo}
        for fut in as_completed(futs):
            row = futs[fut]
            try:
                res = fut.result()
            except Exception as exc:  # never lose the whole run to one row
                res = base_result(row, Plan(entry_kind="none"), "crash", detail=f"harness error: {exc!r}")
                res.crash_site = "harness"
            results.append(res)
            done += 1
            print(f"[{done}/{len(todo)}] {res.outcome:12s} {res.seconds:6.1f}s {row.key}  {res.detail[:110]}",
                  file=sys.stderr, flush=True)
    order = {r.key: i for i, r in enumerate(rows)}
    results.sort(key=lambda r: order.get(f"{r.repo}@{r.commit[:8]}:{r.path}", 0))
    return results


def merge_results(previous: Path, fresh: list[Result], manifest: list[Row]) -> list[Result]:
    """Previous results with the freshly re-run rows replaced, in manifest order."""
    by_key = {f"{r['repo']}@{r['commit'][:8]}:{r['path']}": Result(**r)
              for r in json.loads(previous.read_text())["results"]}
    by_key.update({f"{r.repo}@{r.commit[:8]}:{r.path}": r for r in fresh})
    return [by_key[row.key] for row in manifest if row.key in by_key]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows = select_rows(read_manifest(args.manifest), args.filter)
    note_commits(read_manifest(args.manifest))
    mirrors = Mirrors(args.mirrors)
    for problem in check_mirrors(mirrors, rows):
        print("warning:", problem, file=sys.stderr)
    if args.plan_only:
        for row in rows:
            plan = plan_row(mirrors, row) if mirrors.git_dir(row.repo) else Plan(entry_kind="none")
            print(f"{plan.entry_kind:16s} {plan.check:16s} {row.key} -> {plan.entry or plan.reason} "
                  f"[{len(plan.files)} files, path={plan.pythonpath}]")
        return 0
    results = run_all(mirrors, rows, args)
    if args.merge:
        results = merge_results(args.merge, results, read_manifest(args.manifest))
    summary = aggregate(results)
    payload = {"manifest": str(args.manifest), "timeout": args.timeout, "summary": summary,
               "results": [asdict(r) for r in results]}
    args.out.write_text(json.dumps(payload, indent=2))
    if args.markdown:
        args.markdown.write_text(markdown_table(summary) + "\n")
    print_report(summary)
    print(f"\nwrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
