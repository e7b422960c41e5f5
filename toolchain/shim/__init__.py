"""Import shim: makes ``neuronxcc.nki*`` and ``nki*`` resolve to the embedded simulator.

Installed only where a simulation is wanted (the simulation worker process, ``python -m
nki_agent.toolchain.shim FILE``, or temporarily around an in-process simulation); never on import of
this package, so a real Neuron SDK in the same environment is not shadowed elsewhere. When the real
``neuronxcc`` package is importable it is kept and only its ``nki`` subpackage is replaced.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types
from typing import Any, Callable, Iterator

from nki_agent.toolchain.facts.errors import NkiError
from ..location import caller_location
from ..sim import isa_api, language, runtime
from ..sim.kernel import Kernel, mutable_tensor

_NAMES = ("neuronxcc", "neuronxcc.nki", "neuronxcc.nki.language", "neuronxcc.nki.isa", "neuronxcc.nki.typing",
          "neuronxcc.nki.compiler", "neuronxcc.nki.language.constants", "neuronxcc.nki.isa.constants",
          "nki", "nki.language", "nki.isa", "nki.typing", "nki.compiler", "nki.collectives", "nki.meta",
          "nki.language.constants", "nki.isa.constants",
          "torch_xla", "torch_xla.core", "torch_xla.core.xla_model")


def _jit_factory(generation: str) -> Callable[..., Any]:
    def jit(func: Any = None, mode: str | None = None, **options: Any) -> Any:
        if func is None:
            return lambda f: jit(f, mode=mode, **options)
        if isinstance(func, Kernel):
            return func
        return Kernel(func, generation, mode=mode, **options)

    return jit


def _wrap_factory(generation: str, what: str) -> Callable[..., Any]:
    def wrap(kernel: Any = None, **options: Any) -> Any:
        if kernel is None:
            return lambda k: wrap(k, **options)
        if isinstance(kernel, Kernel):
            return kernel
        return Kernel(kernel, generation, **options)

    wrap.__name__ = what
    return wrap


def _simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """Classic ``nki.simulate_kernel(kernel_or_launcher, *args)``."""
    if not callable(kernel):
        raise NkiError("sim_invalid_argument", "simulate_kernel expects a kernel", caller_location())
    if not isinstance(kernel, Kernel) and not hasattr(kernel, "kernel"):
        kernel = Kernel(kernel, runtime.CLASSIC)
    return kernel(*args, **kwargs)


def _simulate(kernel: Any) -> Any:
    """New ``nki.simulate(kernel)``: a callable that runs the kernel on the CPU."""
    if not isinstance(kernel, Kernel) and not hasattr(kernel, "kernel"):
        kernel = Kernel(kernel, runtime.NEW)
    return kernel


class _NoLatency:
    """``benchmark_result`` of a simulated benchmark: there is no latency to report without hardware."""

    def __getattr__(self, item: str) -> Any:
        raise NkiError("sim_unsupported_api",
                       f"benchmark_result.{item}: a measured latency needs Trainium hardware (a device runner); the "
                       "simulator ran the kernel once and measured nothing (the cost model's estimate is labelled "
                       "estimated, in the code lens and `nki-agent profile`)", caller_location())


class BenchmarkKernel(Kernel):
    """``nki.benchmark(...)(kernel)`` / ``nki.profile``: runs the kernel once on the simulator, at the driver's
    shape (no warmup, no timed iterations); reading ``benchmark_result`` is ``sim_unsupported_api``, a limit of
    the tool (``errors.TOOL_LIMITS``), not the kernel's error."""

    benchmark_result = _NoLatency()


def _benchmark_factory(generation: str) -> Callable[..., Any]:
    def benchmark(kernel: Any = None, **options: Any) -> Any:
        if kernel is None:
            return lambda k: benchmark(k, **options)
        func = kernel.func if isinstance(kernel, Kernel) else kernel
        return BenchmarkKernel(func, generation, **options)

    return benchmark


def _sizeinbytes(dtype: Any) -> int:
    from nki_agent.toolchain.facts import dtypes

    return int(dtypes.as_dtype(dtype).itemsize)


class _TensorType:
    """``nt.tensor[shape]`` / ``nt.tensor[shape, dtype]`` annotations."""

    def __getitem__(self, item: Any) -> "_TensorType":
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> "_TensorType":
        return self


def _identity_decorator(func: Any = None, **kwargs: Any) -> Any:
    return func if func is not None else (lambda f: f)


def _module(name: str, doc: str, attrs: dict[str, Any], strict: bool = True) -> types.ModuleType:
    mod = types.ModuleType(name, doc)
    mod.__dict__.update(attrs)
    mod.__path__ = []  # type: ignore[attr-defined]  # a package, so submodule imports work

    if strict:
        def __getattr__(attr: str) -> Any:
            raise language.UnsupportedApi("sim_unsupported_api",
                                          f"{name}.{attr} is not modelled by the embedded simulator", caller_location())

        mod.__getattr__ = __getattr__  # type: ignore[method-assign]
    return mod


def build_modules() -> dict[str, types.ModuleType]:
    """Fresh module objects for both generations, keyed by their import names."""
    mods: dict[str, types.ModuleType] = {}
    for gen, root in ((runtime.CLASSIC, "neuronxcc.nki"), (runtime.NEW, "nki")):
        nl = language.build(gen)
        nisa = isa_api.build(gen)
        nl.__name__ = f"{root}.language"
        nisa.__name__ = f"{root}.isa"
        typing = _module(f"{root}.typing", "NKI typing", {"tensor": _TensorType(), "mutable_tensor": mutable_tensor,
                                                           "scalar": _TensorType()})
        from ..sim.buffers import psum, sbuf

        compiler = _module(f"{root}.compiler", "NKI compiler directives", {
            "sbuf": sbuf, "psum": psum, "enable_stack_allocator": _identity_decorator,
            "force_auto_alloc": _identity_decorator, "skip_middle_end_transformations": _identity_decorator,
            "multi_buffer": lambda *a, **k: None, "no_reorder": language.no_reorder,
            "allocation_scope": language.no_reorder}, strict=False)
        top: dict[str, Any] = {"jit": _jit_factory(gen), "language": nl, "isa": nisa, "typing": typing,
                               "compiler": compiler, "tensor": language.Tensor}
        nl.__path__ = []  # type: ignore[attr-defined]  # packages: nl.constants / nisa.constants exist
        nisa.__path__ = []  # type: ignore[attr-defined]
        nl_consts = _module(f"{root}.language.constants", "NKI language constants",
                            {"sizeinbytes": _sizeinbytes, **{k: getattr(nl, k) for k in ("tile_size",)}}, strict=False)
        isa_consts = _module(f"{root}.isa.constants", "NKI ISA constants",
                             {k: v for k, v in vars(nisa).items() if isinstance(v, type)}, strict=False)
        nl.constants = nl_consts  # type: ignore[attr-defined]
        nisa.constants = isa_consts  # type: ignore[attr-defined]
        mods[f"{root}.language.constants"] = nl_consts
        mods[f"{root}.isa.constants"] = isa_consts
        if gen == runtime.CLASSIC:
            top.update({"baremetal": _wrap_factory(gen, "baremetal"), "simulate_kernel": _simulate_kernel,
                        "benchmark": _benchmark_factory(gen), "profile": _benchmark_factory(gen),
                        "trace": _jit_factory(gen)})
        else:
            top.update({"simulate": _simulate})
            mods["nki.collectives"] = _module("nki.collectives", "collectives (not simulated)", {})
            mods["nki.meta"] = _module("nki.meta", "NKI meta", {"tensor": language.Tensor}, strict=False)
            top["collectives"] = mods["nki.collectives"]
        mods[root] = _module(root, f"NKI ({gen} API, embedded simulator)", top)
        mods[f"{root}.language"] = nl
        mods[f"{root}.isa"] = nisa
        mods[f"{root}.typing"] = typing
        mods[f"{root}.compiler"] = compiler
    return mods


def _torch_xla_stub() -> dict[str, types.ModuleType]:
    """``torch_xla`` where it is not installed: the XLA device is the CPU, ``mark_step`` does nothing.

    Kernel drivers written for Trainium move tensors to ``xm.xla_device()``; under the simulator the
    kernel runs on NumPy and takes (and returns) CPU tensors.
    """

    def device(*args: Any, **kwargs: Any) -> Any:
        import torch

        return torch.device("cpu")

    def mark_step(*args: Any, **kwargs: Any) -> None:
        return None

    xm = _module("torch_xla.core.xla_model", "torch_xla.core.xla_model stand-in (CPU)",
                 {"xla_device": device, "mark_step": mark_step, "wait_device_ops": mark_step,
                  "xrt_world_size": lambda: 1, "get_ordinal": lambda: 0}, strict=False)
    core = _module("torch_xla.core", "torch_xla.core stand-in", {"xla_model": xm}, strict=False)
    top = _module("torch_xla", "torch_xla stand-in (CPU, embedded NKI simulator)",
                  {"core": core, "device": device, "sync": mark_step}, strict=False)
    return {"torch_xla": top, "torch_xla.core": core, "torch_xla.core.xla_model": xm}


def _real_neuronxcc() -> types.ModuleType | None:
    try:
        if importlib.util.find_spec("neuronxcc") is None:
            return None
        import neuronxcc

        return neuronxcc
    except Exception:  # placeholder packages raise ImportError on import
        return None


def install() -> dict[str, Any]:
    """Put the simulator modules into ``sys.modules``; returns what was there before (for ``uninstall``)."""
    saved = {n: sys.modules.get(n) for n in _NAMES}
    mods = build_modules()
    parent = _real_neuronxcc() if "neuronxcc" not in sys.modules or saved["neuronxcc"] is None else saved["neuronxcc"]
    if parent is None:
        parent = types.ModuleType("neuronxcc", "neuronxcc stand-in (embedded NKI simulator)")
        parent.__path__ = []  # type: ignore[attr-defined]
    mods["neuronxcc"] = parent
    if importlib.util.find_spec("torch_xla") is None if "torch_xla" not in sys.modules else False:
        mods.update(_torch_xla_stub())
    saved["neuronxcc.nki@attr"] = getattr(parent, "nki", None)
    parent.nki = mods["neuronxcc.nki"]  # type: ignore[attr-defined]
    sys.modules.update(mods)
    return saved


def uninstall(saved: dict[str, Any]) -> None:
    parent = sys.modules.get("neuronxcc")
    for n in _NAMES:
        prev = saved.get(n)
        if prev is None:
            sys.modules.pop(n, None)
        else:
            sys.modules[n] = prev
    if parent is not None and saved.get("neuronxcc") is parent:
        if saved.get("neuronxcc.nki@attr") is None:
            with contextlib.suppress(AttributeError):
                delattr(parent, "nki")
        else:
            parent.nki = saved["neuronxcc.nki@attr"]  # type: ignore[union-attr]


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """Context manager: simulator modules importable inside, previous state restored after."""
    saved = install()
    try:
        yield
    finally:
        uninstall(saved)
