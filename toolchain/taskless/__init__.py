"""Feedback without a task: what runs a kernel file that has no task module, and how.

When task discovery (``task_discovery.discover``) finds nothing, a kernel file is still run under the
simulator, in its jailed worker, from the first of these that exists (``plans``):

1. ``main`` — the file's own ``if __name__ == "__main__":`` driver, run as ``python FILE`` would (with
   ``neuronxcc.nki`` / ``nki`` bound to the simulator). Its own checks are the verdict: a failing
   ``assert`` (``np.allclose`` false, ``np.testing.assert_allclose``) or a non-zero ``sys.exit`` is a
   ``sim_wrong_result`` problem at the line that failed; an NKI error is reported at the kernel's line.
2. ``test`` — a pytest test of the workspace that calls a kernel of the file: a ``test_*.py`` /
   ``*_test.py`` file that imports the kernel's module and names one of its kernels in a ``test_*``
   function (``find_tests``), run with pytest in the worker (the kernel module it imports is the file
   being simulated — the editor buffer's copy — not the one on disk).
3. ``shapes`` — inputs synthesised from shape lines (``shape_specs``), one comment per kernel::

       # nki: a=(256, 512) float32, b=(256, 512) float32         (above the kernel's decorator / def)
       # nki: my_kernel(a=(256, 512) float32, scale=0.5)        (anywhere: names the kernel)
       # nki[2, 2]: a=(256, 1024) float16, b=(256, 1024) float16  (launched as kernel[2, 2](...))

   ``name=(d0, d1, ...) dtype`` is a random tensor (dtype optional, float32 by default; any NKI
   dtype name, ``nl.`` / ``np.`` prefixes allowed); ``name=LITERAL`` passes a Python literal (number,
   string, ``True`` / ``False`` / ``None``, a list). Parameters left out keep their defaults.

A driver (or test) that launches no kernel of the file gives way to the next source; when none
launched one, the first one's outcome is the result. Each source runs in a worker of its own (the jailed
path starts a fresh one per request), so a test never runs in the process of the file's driver. The result
is a ``SimulateResult`` like a task's simulation — ``trace``, ``inputs`` (of ``kernel_name``), and one
``launches`` entry per kernel of the file that ran — with ``via`` saying what ran (``via_test`` the test's
id), so hovers and inlay hints get concrete shapes and the code lens can say "simulated via __main__".
``via`` / ``via_test`` are the parent's (``plan.stamp``), never the worker's reply; and since the file's own
code ran in every one of those workers (the test imports it), the verdict is ``self_reported``: the lens
and the CLI say "self-reported by the file" (``verdict.claim``).

The package has two halves. Planning, in the parent (pure: reads the buffer and the workspace's test files,
never executes them): ``source.py`` (the file's kernels and ``__main__`` block), ``shape_lines.py`` (the
shape-line grammar, the pre-filled line, input synthesis), ``workspace_tests.py`` (finding the tests) and
``plan.py`` (``read_facts``, ``plans``, ``request``, ``simulate``, ``stamp``), ``verdict.py`` (what a clean run may
claim, and whose word it is). Running, in the worker: ``run.py``
(``run_job`` — the worker's ``taskless`` op — which executes user code and must only ever run in the sandboxed
worker, ``sandbox.py``, or, for trusted callers, in process). No module of the package imports pydantic at
import time (the worker writes plain JSON); this file only re-exports what the rest of the project uses.
"""

from __future__ import annotations

from .plan import MAIN, NONE, SHAPES, TEST, Facts, Plan, plans, read_facts, request, simulate, stamp
from .run import contained, run_job
from .shape_lines import Arg, ShapeProblem, ShapeSpec, shape_line, shape_specs
from .source import KernelDef, kernel_defs, main_checks, parse
from .verdict import SELF_REPORTED, claim, glyph
from .workspace_tests import TestRef, find_tests, module_names, test_scope

__all__ = ["MAIN", "NONE", "SELF_REPORTED", "SHAPES", "TEST", "Arg", "Facts", "KernelDef", "Plan", "ShapeProblem",
           "ShapeSpec", "TestRef", "claim", "contained", "find_tests", "glyph", "kernel_defs", "main_checks", "module_names",
           "parse", "plans", "read_facts", "request", "run_job", "shape_line", "shape_specs", "simulate", "stamp",
           "test_scope"]
