"""Runs the as-you-type static checks over every file of the public kernel corpus; any diagnostic on
these (valid, published) kernels is a false-positive candidate. Also runs the kernel role's tamper
tripwire (``toolchain/isolation/tamper.py``) and lists what it would refuse to load.

Run: ``NKI_CORPUS_MIRRORS=DIR .venv/bin/python benchmarks/corpus/static_corpus.py [--manifest TSV]``.
Files are read with ``git show COMMIT:PATH`` from the bare mirrors; nothing is written to disk.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def mirror_dir(mirrors: Path, repo: str) -> Path | None:
    base = mirrors / repo.replace("/", "+")
    if not base.exists():
        return None
    for cand in [base] + sorted(base.rglob("*.git")) + [p.parent for p in base.rglob("HEAD")]:
        if (cand / "objects").exists():
            return cand
    return None


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirrors", default=os.environ.get("NKI_CORPUS_MIRRORS"))
    ap.add_argument("--manifest", default=str(ROOT.parent / "shared" / "docs" / "kernel-corpus.tsv"))
    args = ap.parse_args(argv)
    if not args.mirrors:
        ap.error("--mirrors or NKI_CORPUS_MIRRORS is required")
    from nki_agent.diagnostics.static import check_text
    from nki_agent.toolchain.isolation.tamper import findings

    rows = list(csv.DictReader(open(args.manifest, encoding="utf-8"), delimiter="\t"))
    checked = flagged = missing = tampered = 0
    total_time = 0.0
    for row in rows:
        git = mirror_dir(Path(args.mirrors), row["repo"])
        if git is None:
            missing += 1
            continue
        proc = subprocess.run(["git", f"--git-dir={git}", "show", f"{row['commit']}:{row['path']}"],
                              capture_output=True)
        if proc.returncode != 0:
            missing += 1
            continue
        t0 = time.perf_counter()
        diags = check_text(row["path"], proc.stdout)
        total_time += time.perf_counter() - t0
        checked += 1
        if diags:
            flagged += 1
            for d in diags:
                print(f"{row['repo']}@{row['commit'][:8]}:{d.path}:{d.line}: [{d.code}] {d.message}")
        found = findings(proc.stdout.decode("utf-8", "replace"))
        tampered += bool(found)
        for f in found:
            print(f"{row['repo']}@{row['commit'][:8]}:{row['path']}:{f.line}: [tamper] {f.what}")
    print(f"\n{checked} corpus files checked, {flagged} with diagnostics, {tampered} the tamper tripwire refuses, "
          f"{missing} unavailable; "
          f"{total_time * 1e3 / max(checked, 1):.1f} ms per file on average")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
