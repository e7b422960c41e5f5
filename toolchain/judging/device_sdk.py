"""The Neuron SDK as the device role calls it: one adapter per API generation, only documented entry points.

- classic (``import neuronxcc.nki as nki``): a launch is ``nki.baremetal(kernel)[grid](*arrays)``
  (NumPy in, NumPy out, on the device); a timing window is ``nki.benchmark(warmup=, iters=)(kernel)``
  called on the arrays, then ``benchmark_result.nc_latency.get_latency_percentile(p)`` for the
  documented grid p ∈ {0, 1, 10, 25, 50, 90, 99, 100} (µs) — the benchmark exposes nothing per iteration.
- new (``import nki``): a launch is ``kernel[lnc](*arrays)`` (an ``nki.jit`` kernel called with NumPy
  arrays compiles and runs on the device). NKI ≥ 0.1 has no ``nki.benchmark``; timing uses nkipy's
  ``BaremetalExecutor`` when it is importable: one launch with ``NEURON_FRAMEWORK_DEBUG=1`` in a
  scratch folder keeps the NEFF of exactly that launch, which ``BaremetalExecutor.benchmark(compiled,
  *arrays, warmup_iterations=, benchmark_iterations=)`` replays; its ``durations_ms`` are the raw
  per-iteration figures. Without nkipy the latency is "not measured", with the reason.

The windows follow ``runner.latency.next_window`` (warmup, then windows until 1 % spread, the
iteration cap or the time budget). Figures are sent raw; the parent computes the statistics.
Importing this module imports no SDK; ``load`` does, and a missing SDK is ``SdkMissing``.
"""

from __future__ import annotations

import ast
import glob
import importlib
import inspect
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nki_agent.toolchain.source_facts import generation_of_source

CLASSIC, NEW = "classic", "new"
PERCENTILES = (0, 1, 10, 25, 50, 90, 99, 100)


class SdkMissing(RuntimeError):
    """The Neuron SDK (or the part of it a generation needs) is not importable here."""


@dataclass
class Sdk:
    """The imported SDK of one generation."""

    generation: str
    nki: Any
    nkipy_runtime: Any = None  # nkipy.runtime, when importable (new generation timing)
    hlo: Any = None  # nkipy.core.backend.hlo
    modules: list[str] = field(default_factory=list)  # what was imported (the role fingerprints them)


def generation_of(source: str) -> str:
    """``new`` when the file imports only the new ``nki`` API (``source_facts``), else ``classic``."""
    return NEW if generation_of_source(source) == NEW else CLASSIC


def jit_functions(source: str) -> list[str]:
    """Names of the top-level functions decorated with ``@nki.jit`` / ``@jit`` (with or without arguments)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                if name == "jit":
                    out.append(node.name)
    return out


def load(generation: str) -> Sdk:
    """Import the SDK of ``generation`` (and nkipy's runtime for new-API timing, when it is there)."""
    name = "neuronxcc.nki" if generation == CLASSIC else "nki"
    try:
        nki = importlib.import_module(name)
    except ImportError as e:
        what = "neuronx-cc (the classic neuronxcc.nki API)" if generation == CLASSIC else "the nki package (NKI >= 0.1)"
        raise SdkMissing(f"the Neuron SDK is not installed on this runner: {what} cannot be imported ({e})") from None
    sdk = Sdk(generation, nki, modules=[name])
    if generation == NEW:
        try:
            sdk.nkipy_runtime = importlib.import_module("nkipy.runtime")
            sdk.hlo = importlib.import_module("nkipy.core.backend.hlo")
            sdk.modules += ["nkipy.runtime", "nkipy.core.backend.hlo"]
        except ImportError:
            sdk.nkipy_runtime = sdk.hlo = None
    return sdk


def launcher(sdk: Sdk, kernel: Any, grid: Sequence[int], lnc: int | None) -> Callable[..., Any]:
    """What runs the kernel once on the device: ``baremetal(kernel)[grid]`` or ``kernel[lnc]``."""
    if sdk.generation == CLASSIC:
        run = sdk.nki.baremetal(kernel)
        return run[tuple(grid)] if grid else run  # type: ignore[no-any-return]
    return kernel[lnc] if lnc else kernel  # type: ignore[no-any-return]


def outputs(result: Any) -> list[Any]:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def func_of(kernel: Any) -> Any:
    """The Python function behind an SDK kernel object (for its signature and name)."""
    for attr in ("func", "__wrapped__", "fn"):
        inner = getattr(kernel, attr, None)
        if callable(inner):
            return inner
    return kernel


def parameter_count(kernel: Any) -> int | None:
    try:
        return len(inspect.signature(func_of(kernel)).parameters)
    except (TypeError, ValueError):
        return None


@dataclass
class Timing:
    """What the timing frame carries: raw figures and how they were taken (never statistics)."""

    measured: bool
    source: str = ""
    warmup: int = 0
    samples_us: list[float] = field(default_factory=list)  # BaremetalExecutor: per iteration
    windows: list[dict[str, Any]] = field(default_factory=list)  # nki.benchmark: per window, its percentile grid
    stop: str = ""
    reason: str = ""  # why it was not measured

    def as_json(self) -> dict[str, Any]:
        return {"kind": "timing", "measured": self.measured, "source": self.source, "warmup": self.warmup,
                "samples_us": self.samples_us, "windows": self.windows, "stop": self.stop, "reason": self.reason}


def _loop(policy: Any, window: Callable[[int, int], float | None], clock: Callable[[], float]) -> str:
    """Run windows as ``runner.latency.next_window`` says; ``window(n, warmup)`` times one and returns its spread."""
    from ...runner.latency import next_window, stop_reason

    t0, done, last, first = clock(), 0, None, True
    while True:
        n = next_window(policy, done, last, clock() - t0)
        if n <= 0:
            return stop_reason(policy, done, last, clock() - t0)
        last = window(n, policy.warmup if first else min(policy.warmup, 1))
        first, done = False, done + n


def time_classic(sdk: Sdk, kernel: Any, args: Sequence[Any], grid: Sequence[int], policy: Any,
                 clock: Callable[[], float] = time.monotonic) -> Timing:
    """``nki.benchmark`` windows: each window's documented percentile grid, read right after it ran."""
    out = Timing(measured=True, source="nki.benchmark", warmup=policy.warmup)

    def window(n: int, warmup: int) -> float | None:
        bench = sdk.nki.benchmark(warmup=warmup, iters=n)(kernel)
        bench = bench[tuple(grid)] if grid else bench
        bench(*args)
        lat = bench.benchmark_result.nc_latency
        grid_us = {str(p): float(lat.get_latency_percentile(p)) for p in PERCENTILES}
        out.windows.append({"iterations": n, "warmup": warmup, "percentiles": grid_us})
        p50 = grid_us["50"]
        return (grid_us["99"] - p50) / p50 if p50 > 0 else None

    out.stop = _loop(policy, window, clock)
    return out


class _Traced:
    """What nkipy's ``CompiledKernel`` expects of a traced kernel: the function, its name, its HLO module."""

    def __init__(self, func: Any, code: Any) -> None:
        self.func, self._code = func, code

    @property
    def __name__(self) -> str:  # nkipy reads the kernel name from here
        return str(getattr(self.func, "__name__", "kernel"))


def keep_neff(run: Callable[[], Any], scratch: str) -> tuple[Any, str | None]:
    """Run one launch with ``NEURON_FRAMEWORK_DEBUG=1`` in ``scratch``; its result and the NEFF it kept."""
    os.makedirs(scratch, exist_ok=True)
    cwd, before = os.getcwd(), os.environ.get("NEURON_FRAMEWORK_DEBUG")
    os.environ["NEURON_FRAMEWORK_DEBUG"] = "1"
    try:
        os.chdir(scratch)
        result = run()
    finally:
        os.chdir(cwd)
        if before is None:
            os.environ.pop("NEURON_FRAMEWORK_DEBUG", None)
        else:
            os.environ["NEURON_FRAMEWORK_DEBUG"] = before
    neffs = sorted(glob.glob(os.path.join(scratch, "**", "*.neff"), recursive=True), key=os.path.getmtime)
    return result, (neffs[-1] if neffs else None)


def time_new(sdk: Sdk, kernel: Any, args: Sequence[Any], neff: str | None, results: Sequence[Any], policy: Any,
             clock: Callable[[], float] = time.monotonic) -> Timing:
    """nkipy ``BaremetalExecutor.benchmark`` windows on the NEFF of the checked launch (raw durations)."""
    from ...runner.latency import spread_of

    if sdk.nkipy_runtime is None or sdk.hlo is None:
        return Timing(False, reason="nkipy is not installed on this runner: new-API (nki.jit) kernels are timed with "
                                    "nkipy's BaremetalExecutor (NKI >= 0.1 has no nki.benchmark)")
    if neff is None:
        return Timing(False, reason="the launch kept no NEFF (NEURON_FRAMEWORK_DEBUG=1) for nkipy to time")
    func = func_of(kernel)
    hlo = sdk.hlo.HLOModule(name=str(getattr(func, "__name__", "kernel")))
    try:
        names = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        names = [f"input{i}" for i in range(len(args))]
    for name, a in zip(names, args):
        if isinstance(a, np.ndarray):
            hlo.add_parameter(a.shape, a.dtype, name=name)
    hlo.set_results([sdk.hlo.HLOTensor(shape=r.shape, dtype=r.dtype, name=f"output{i}")
                     for i, r in enumerate(results) if isinstance(r, np.ndarray)])
    compiled = sdk.nkipy_runtime.CompiledKernel(_Traced(func, hlo), neff)
    out = Timing(measured=True, source="BaremetalExecutor", warmup=policy.warmup)
    with sdk.nkipy_runtime.BaremetalExecutor(verbose=0) as spike:

        def window(n: int, warmup: int) -> float | None:
            stats = spike.benchmark(compiled, *args, warmup_iterations=warmup, benchmark_iterations=n)
            got = [float(d) * 1000.0 for d in list(stats.durations_ms)[:n]]
            out.samples_us.extend(got)
            return spread_of(got)

        out.stop = _loop(policy, window, clock)
    return out
