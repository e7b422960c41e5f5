"""Benchmark: as-you-type static check of a 1,000-line kernel file (goal: median <= 30 ms).

Run: ``.venv/bin/python benchmarks/static_check.py [--lines 1000] [--repeat 60] [--no-helper]``. The file
is built from the example kernels, each copy renamed, until it has the requested length. Three figures:
the cold check of a file never seen before (nothing parsed or cached), the check after a one-line
edit (the as-you-type case), and the check after an import edit (every function analysed again).
By default cold checks and import edits use the helper process the language server starts
(``diagnostics/static/parallel.py``: two cores); ``--no-helper`` measures one core alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_file(lines: int) -> str:
    kernels = sorted((ROOT / "examples").glob("*/kernel_classic.py"))
    header = "import numpy as np\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n" \
             "import neuronxcc.nki.isa as nisa\n\n"
    parts = [header]
    n = 0
    while sum(p.count("\n") for p in parts) < lines:
        for k in kernels:
            body = "\n".join(line for line in k.read_text().splitlines() if not line.startswith(("import", "from")))
            parts.append(body.replace("def ", f"def v{n}_") + "\n\n")
            n += 1
            if sum(p.count("\n") for p in parts) >= lines:
                break
    return "".join(parts)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=60)
    ap.add_argument("--no-helper", action="store_true", help="one core: no helper process for cold checks")
    args = ap.parse_args(argv)
    from nki_agent.diagnostics.static import check_text, clear_caches, parallel

    helper = None if args.no_helper else parallel.enable()
    if helper is not None and not helper.wait_ready(30):
        print("helper process did not start; measuring one core")
    text = build_file(args.lines)
    check_text("bench.py", text)  # warm-up: parser construction, imports
    cold, typing, imports = [], [], []
    for k in range(args.repeat):
        clear_caches()  # cold: nothing known about the file (no parse, no result cached)
        t0 = time.perf_counter()
        check_text("bench.py", text)
        cold.append(time.perf_counter() - t0)
        # as-you-type: one keystroke in one function (a changed constant), the rest unchanged
        edited = text.replace("P = nl.tile_size.pmax", f"P = nl.tile_size.pmax  # {k}", 1)
        t0 = time.perf_counter()
        check_text("bench.py", edited)
        typing.append(time.perf_counter() - t0)
        # an import edit: every function's context changes, so every function is analysed again
        check_text("bench.py", text)
        retyped = text.replace("import numpy as np\n", f"import numpy as np{k}\n", 1)
        t0 = time.perf_counter()
        check_text("bench.py", retyped)
        imports.append(time.perf_counter() - t0)
    n = text.count(chr(10))
    print(f"cold checks and import edits with {'two cores (helper process)' if parallel.active() else 'one core'}"
          + (f"; the helper answered {helper.served} requests" if helper is not None else ""))
    for label, times in (("cold (first check of the file)", cold), ("after a one-line edit", typing),
                         ("after an import edit (all functions again)", imports)):
        times.sort()
        print(f"{n} lines, {label}: median {statistics.median(times) * 1e3:.1f} ms, "
              f"p90 {times[int(len(times) * 0.9)] * 1e3:.1f} ms, min {times[0] * 1e3:.1f} ms (goal: median <= 30 ms)")
    parallel.disable()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
