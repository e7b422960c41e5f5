"""The mutation suite: deterministic broken variants of the project's correct example kernels.

Owns the mutation operators (each injects one realistic NKI bug, taken from the error catalog, the static
rules and the quick-fix fixtures), the enumeration of kernel x operator x site (``mutants``) and the
filter that keeps only mutants the embedded toolchain really finds broken (``keep_broken``). The fix
agent's benchmark (repair rate, time per fix of the offline ``rules`` backend) runs over this suite.

Two families of operators: ``quick_fix`` bugs are of a kind some deterministic quick fix in
``diagnostics/`` targets; ``logic`` bugs (off-by-one, swapped operands, wrong axis / function / scale)
are ones no quick fix can repair, so the repair rate is measured honestly.

No example has a ``sequential_range`` loop or a ``&`` mask, so "sequential_range -> affine_range" has no
site and "& -> and" is injected as a two-sided mask bound joined with ``and``.

    python -m nki_agent.agent.mutations --list     # the suite
    python -m nki_agent.agent.mutations --check    # verify every mutant; table of what broke how
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from ..toolchain import api
from nki_agent.toolchain.protocol.jobs import VerifyResult
from . import mutation_sites as sites
from .mutation_sites import Site, Source

MAX_PER_KERNEL = 2  # sites of one operator in one kernel: a third would exercise the same repair again
MAX_PER_OPERATOR = 10  # per operator over all kernels, spread evenly: ~100 mutants, a full agent run in minutes
VERIFY_SEEDS = 2  # a second input draw catches a bug one lucky draw hides, at twice the cost of one
WRONG_RESULT = "sim_wrong_result"  # the catalog id of "runs, but the output differs from the reference"
REPO_EXAMPLES = Path(__file__).resolve().parents[1] / "examples"  # a source checkout's examples/ (not installed)


@dataclass(frozen=True)
class Mutant:
    """One broken variant of one example kernel. ``line``: 1-based line of the injected bug in ``text``
    (for a deleted statement, the line where it was). ``expected_class``: the kind of bug in the words of
    the error catalog; ``observed``: what verification reported (set by ``keep_broken``)."""

    id: str
    operator: str
    kernel_path: str
    task_path: str
    text: str
    line: int
    description: str
    expected_class: str
    observed: str = ""


@dataclass(frozen=True)
class Operator:
    """A mutation operator: ``sites(source)`` lists every mutant it can make of one kernel, in source order.
    ``expected_class``: what a correct toolchain reports for it under the task's default target;
    ``family``: ``quick_fix`` if a deterministic quick fix in ``diagnostics/`` targets bugs of this kind,
    ``logic`` if none can."""

    name: str
    expected_class: str
    family: Literal["quick_fix", "logic"]
    description: str
    sites: Callable[[Source], list[Site]]
    expected_new: str = ""  # the class in a new-API kernel, when the generations differ

    def expected(self, generation: str) -> str:
        return self.expected_new if generation == "new" and self.expected_new else self.expected_class


_OPERATORS = (
    Operator("bool_and", "err_control_flow_condition_depending_on_arange", "quick_fix",
             "`&` -> `and` in a mask (Python truth value of an index expression)", sites.bool_and),
    Operator("arange_1d", "err_1d_arange_not_supported", "quick_fix",
             "`nl.arange(n)[:, None]` -> `nl.arange(n)`", sites.arange_1d),
    Operator("drop_store", "err_tensor_output_not_written_to", "quick_fix",
             "the final write of the output removed", sites.drop_store),
    # bf16 PSUM is legal on the default targets (classic trn1, new trn3): the bug shows as lost precision;
    # sim_unsupported_dtype (and its quick fix) only on a new-API kernel verified for trn1/trn2
    Operator("psum_bf16", WRONG_RESULT, "quick_fix", "matmul PSUM accumulator fp32 -> bf16", sites.psum_bf16),
    # the new compiler allows the allocation in a loop: each iteration then rebinds a fresh output
    Operator("shared_hbm_in_loop", "err_shared_hbm_must_in_kernel_level", "quick_fix",
             "the hoisted shared_hbm output allocated inside the loop", sites.shared_hbm_in_loop, WRONG_RESULT),
    Operator("partition_256", "err_num_partition_exceed_arch_limit", "quick_fix",
             "partition tile size 128 -> 256", sites.partition_256),
    Operator("psum_store", "err_unsupported_memory", "quick_fix",
             "PSUM -> SBUF copy removed, the PSUM tile stored straight to HBM", sites.psum_store),
    Operator("classic_import", "sim_removed_api", "quick_fix",
             "classic `neuronxcc.nki` imports in a new-API kernel (the migration case)", sites.classic_import),
    Operator("mixed_indexing", "err_unsupported_mixing_basic_advanced_tensor_indexing", "logic",
             "a free-axis index array replaced by a slice next to an index array", sites.mixed_indexing),
    Operator("off_by_one", "sim_shape_mismatch", "logic", "a slice or arange bound one short", sites.off_by_one),
    Operator("swap_operands", WRONG_RESULT, "logic",
             "operands of a non-commutative op (subtract, divide, matmul) swapped", sites.swap_operands),
    Operator("reduce_axis", "sim_invalid_argument", "logic", "reduction over the partition axis (axis=0) "
             "instead of axis=1", sites.reduce_axis),
    Operator("wrong_activation", WRONG_RESULT, "logic", "gelu/silu/relu/rsqrt swapped for a look-alike",
             sites.wrong_activation),
    Operator("drop_scale", WRONG_RESULT, "logic", "a scale factor (1/n, 1/sqrt(d), scale=) dropped", sites.drop_scale),
)


_BY_NAME = {op.name: op for op in _OPERATORS}


def operators() -> list[Operator]:
    return list(_OPERATORS)


def kernels(examples_dir: str | os.PathLike[str] | None = None) -> list[tuple[Path, Path]]:
    """(kernel, task) pairs: every ``kernel_*.py`` next to a ``task.py``, sorted (as ``nki-agent demo``)."""
    default = REPO_EXAMPLES if REPO_EXAMPLES.is_dir() else Path("examples")
    root = Path(examples_dir) if examples_dir is not None else default
    return [(k, t) for t in sorted(root.glob("*/task.py")) for k in sorted(t.parent.glob("kernel_*.py"))]


def _spread(items: list[Mutant], n: int) -> list[Mutant]:
    return items if len(items) <= n else [items[i * len(items) // n] for i in range(n)]


def mutants(examples_dir: str | os.PathLike[str] | None = None,
            operators: Sequence[str | Operator] | None = None, limit: int | None = None, *,
            per_kernel: int = MAX_PER_KERNEL, per_operator: int = MAX_PER_OPERATOR) -> list[Mutant]:
    """Every mutant of every example kernel, deterministic. Ids are ``<task>/<api>/<operator>/<k>`` (k: the
    site's index in the kernel, source order). At most ``per_kernel`` sites per operator and kernel, and
    ``per_operator`` per operator (spread evenly over the kernels). The list interleaves the operators
    round-robin, so ``limit`` keeps a sample of every operator."""
    chosen = [o if isinstance(o, Operator) else _by_name(o) for o in operators] if operators else list(_OPERATORS)
    sources = [(k, t, Source(k.read_text(encoding="utf-8"))) for k, t in kernels(examples_dir)]
    per_op: list[list[Mutant]] = []
    for op in chosen:
        found: list[Mutant] = []
        for kernel, task, src in sources:
            seen = {src.text}
            api_name = kernel.stem.removeprefix("kernel_")
            for k, site in enumerate(op.sites(src)[:per_kernel]):
                if site.text in seen or not _parses(site.text):
                    continue
                seen.add(site.text)
                found.append(Mutant(f"{kernel.parent.name}/{api_name}/{op.name}/{k}", op.name, str(kernel),
                                    str(task), site.text, site.line, site.description,
                                    op.expected(src.generation)))
        per_op.append(_spread(found, per_operator))
    out = [m for i in range(max(map(len, per_op), default=0)) for ms in per_op if i < len(ms) for m in [ms[i]]]
    return out[:limit] if limit is not None else out


def _by_name(name: str) -> Operator:
    if name not in _BY_NAME:
        raise ValueError(f"unknown mutation operator {name!r}; known: {', '.join(_BY_NAME)}")
    return _BY_NAME[name]


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


# -- keeping only the really broken ------------------------------------------------------------------------
Verify = Callable[[str, str], VerifyResult]


def _default_verify(kernel: str, task: str) -> VerifyResult:
    return api.verify(kernel, task, seeds=VERIFY_SEEDS)


def observed_class(result: VerifyResult) -> str | None:
    """The first error's code (else the first problem's, else ``sim_wrong_result``); None if correct."""
    if result.correct:
        return None
    errors = [p for p in result.problems if p.severity == "error"] or result.problems
    return errors[0].code if errors else WRONG_RESULT


def observe(mutant: Mutant, verify: Verify | None = None) -> str | None:
    """Verify the mutant from a temp copy (``<tmp>/<task>/<kernel file name>``; the user's files untouched)."""
    with tempfile.TemporaryDirectory(prefix="nki_mutant_") as tmp:
        folder = Path(tmp) / Path(mutant.kernel_path).parent.name
        folder.mkdir()
        path = folder / Path(mutant.kernel_path).name
        path.write_text(mutant.text, encoding="utf-8")
        return observed_class((verify or _default_verify)(str(path), mutant.task_path))


def keep_broken(mutants: Sequence[Mutant], verify: Verify | None = None, jobs: int | None = None) -> list[Mutant]:
    """The mutants that do not verify correct, in order, each with ``observed`` set. Verifications run
    ``jobs`` at a time (default: one per CPU; each is its own sandboxed worker process)."""
    workers = max(1, jobs or os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        codes = list(pool.map(lambda m: observe(m, verify), mutants))
    return [replace(m, observed=c) for m, c in zip(mutants, codes) if c is not None]


# -- command line -----------------------------------------------------------------------------------------
def _table(generated: Sequence[Mutant], broken: Sequence[Mutant]) -> list[str]:
    rows = [("operator", "family", "generated", "broken", "as expected", "observed codes")]
    for op in _OPERATORS:
        gen = [m for m in generated if m.operator == op.name]
        if not gen:
            continue
        bro = [m for m in broken if m.operator == op.name]
        codes = Counter(m.observed for m in bro)
        rows.append((op.name, op.family, str(len(gen)), str(len(bro)),
                     str(sum(m.observed == m.expected_class for m in bro)),
                     ", ".join(f"{c} x{n}" for c, n in sorted(codes.items(), key=lambda x: (-x[1], x[0])))))
    rows.append(("total", "", str(len(generated)), str(len(broken)),
                 str(sum(m.observed == m.expected_class for m in broken)), ""))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[5] for r in rows]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nki_agent.agent.mutations", description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--list", action="store_true", help="print the suite")
    mode.add_argument("--check", action="store_true", help="verify every mutant, print what broke how")
    parser.add_argument("--examples", default=None, help="folder of example tasks (default: the repo's examples/)")
    parser.add_argument("--operator", action="append", help="only this operator (repeatable)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many mutants")
    parser.add_argument("--jobs", type=int, default=None, help="parallel verifications (default: CPUs)")
    args = parser.parse_args(argv)
    try:
        suite = mutants(args.examples, args.operator, args.limit)
    except ValueError as e:
        parser.error(str(e))
    if args.list:
        for m in sorted(suite, key=lambda m: m.id):
            print(f"{m.id:48} {m.expected_class:42} line {m.line:<4} {m.description}")
        print(f"{len(suite)} mutants, {len({m.operator for m in suite})} operators")
        return 0
    t0 = time.perf_counter()
    broken = keep_broken(suite, jobs=args.jobs)
    print("\n".join(_table(suite, broken)))
    print(f"{len(broken)} of {len(suite)} mutants broken; {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
