"""A kernel of the toolchain's own, traced and executed once by a warm executor before it has a job.

A warm executor (``isolation/standby.py``) runs this while it waits to be claimed: the kernel below is traced on
placeholders, its program packed, unpacked and executed with the cost model's estimate, exactly as a job's
program is (``trace_roles``), so the first-call costs of the simulator, the replay and the cost model (lazy
tables, caches, the allocator's first pages) are paid before a verification needs them. No user code is
involved, and nothing of it is kept: the executor's job starts from the same state a cold one would, plus warm
caches.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _kernel(nki: Any, nl: Any, nisa: Any) -> Any:
    @nki.jit
    def warm_kernel(a_t: Any, b: Any) -> Any:  # out = a_t.T @ b + 1, then a copy through SBUF
        k, m = a_t.shape
        _, n = b.shape
        out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        lhs = nl.ndarray((k, m), dtype=a_t.dtype, buffer=nl.sbuf)
        rhs = nl.ndarray((k, n), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=lhs, src=a_t)
        nisa.dma_copy(dst=rhs, src=b)
        acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, lhs, rhs)
        res = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.tensor_scalar(dst=res, data=res, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=out, src=res)
        return out

    return warm_kernel


def run() -> None:
    """Trace, pack, unpack and execute the built-in kernel with an estimate; raises what a bug of ours raises."""
    from nki_agent.toolchain.judging.roles import _task_settings
    from nki_agent.toolchain.judging.trace_roles import trace_kernel, placeholders, spec_of
    from nki_agent.toolchain.judging.verify import Case, SeedResult, run_cases
    from nki_agent.toolchain.protocol.program import pack, unpack
    from nki_agent.toolchain.shim import build_modules
    from nki_agent.toolchain.sim.replay import ProgramDispatch, ProgramKernel

    mods = build_modules()
    kernel = _kernel(mods["nki"], mods["nki.language"], mods["nki.isa"])
    settings = _task_settings({})
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((128, 128)).astype(np.float32), rng.standard_normal((128, 512)).astype(np.float32)]
    program = trace_kernel(kernel, settings, placeholders(spec_of(arrays)), 2, None, None)
    dispatch = ProgramDispatch()
    dispatch.program = ProgramKernel(unpack(pack(program)))
    result = run_cases(dispatch, settings, "", [Case(0, arrays, 0.0)],  # type: ignore[arg-type]
                       lambda seed, got, expected, mutated: SeedResult(seed=seed, correct=True))
    if not result.compiled or result.problems:
        raise RuntimeError(f"the warm-up kernel did not run: {[p.message for p in result.problems]}")
