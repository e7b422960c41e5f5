"""Tracing a kernel in its own process: every NKI call it makes becomes an event of a ``program.Program``.

``boundary(fn, name)`` wraps each callable kernel code can reach (the ``nl`` / ``nisa`` namespaces,
the tensor's methods and operators). Outside a recording it only looks up a context variable. While a
``Recorder`` is active (``kernel.launch`` activates it around the kernel body, on placeholder inputs
that carry no values of any seed), the outermost call — not the simulator's own calls inside it —
is run as usual (its trace-time checks raise at the user's line) and appended to the program with
its arguments encoded by ``program.encode``; tensors it returns get ids, loop iterators become
``_Loop`` proxies whose steps are events, and a weak reference per tensor handle adds a ``drop``
event when the kernel lets go of it. Whatever the kernel does to this process can only change the
program it emits: the verdict comes from ``replay.py`` executing that program elsewhere.
"""

from __future__ import annotations

import contextvars
import functools
import types
import weakref
from typing import Any, Callable

import numpy as np

from nki_agent.toolchain.facts.errors import NkiError, SourceLocation
from ..location import caller_location
from nki_agent.toolchain.protocol.program import (
    CALL,
    CLOSE,
    DROP,
    MAX_EVENTS,
    NEXT,
    Input,
    Instance,
    Program,
    Unencodable,
    encode,
)

_REC: contextvars.ContextVar["Recorder | None"] = contextvars.ContextVar("nki_recorder", default=None)


def boundary(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn`` as a traced NKI call named ``name`` (``nl.load``, ``nisa.nc_matmul``, ``Tensor.__getitem__``)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        rec = _REC.get()
        if rec is None or rec.depth:
            return fn(*args, **kwargs)
        return rec.call(name, fn, args, kwargs)

    call.__nki_boundary__ = name  # type: ignore[attr-defined]
    return call


def wrap_namespace(ns: dict[str, Any], prefix: str) -> None:
    """Wrap every function of a namespace dict in place (classes, constants and enums stay as they are)."""
    for k, v in list(ns.items()):
        if isinstance(v, types.FunctionType) and not hasattr(v, "__nki_boundary__"):
            ns[k] = boundary(v, f"{prefix}.{k}")


def current() -> "Recorder | None":
    return _REC.get()


class _Loop:
    """A loop iterator (``nl.affine_range`` ...) handed to kernel code: each step and its end are events."""

    __slots__ = ("rec", "lid", "it", "closed")

    def __init__(self, rec: "Recorder", lid: int, it: Any) -> None:
        self.rec, self.lid, self.it, self.closed = rec, lid, it, False

    def __iter__(self) -> "_Loop":
        return self

    def __next__(self) -> Any:
        if not self.closed and self.rec.live:
            self.rec.emit([NEXT, self.lid])
        return next(self.it)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.rec.live:
                self.rec.emit([CLOSE, self.lid])
            self.it.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a loop closed during interpreter teardown
            pass


class Recorder:
    """The program being traced: API names, locations, tensor ids, loops and the current instance's events."""

    def __init__(self, inputs: list[np.ndarray]) -> None:
        self.inputs = inputs  # the placeholder arrays the launch was given, in order
        self.depth = 0
        self.live = False  # inside the kernel body
        self.events: list[list[Any]] = []
        self.instances: list[Instance] = []
        self.input_tensors: list[Input] = []
        self.fns: list[str] = []
        self._fn_index: dict[str, int] = {}
        self.locs: list[SourceLocation | None] = []
        self._loc_index: dict[Any, int] = {}
        self._ids: dict[int, int] = {}
        self._refs: dict[int, Any] = {}
        self._next_id = 0
        self._next_loop = 0
        self.count = 0

    # -- activation ------------------------------------------------------------------------------
    def activate(self) -> contextvars.Token["Recorder | None"]:
        return _REC.set(self)

    def deactivate(self, token: contextvars.Token["Recorder | None"]) -> None:
        _REC.reset(token)

    def emit(self, event: list[Any]) -> None:
        self.count += 1
        if self.count > MAX_EVENTS:
            raise NkiError("sim_memory_limit", f"the kernel makes more than {MAX_EVENTS} NKI calls: too large to "
                           "trace", caller_location())
        self.events.append(event)

    # -- ids -------------------------------------------------------------------------------------
    def tensor_id(self, t: Any) -> int:
        rid = self._ids.get(id(t))
        if rid is None:
            raise Unencodable("a tensor that no traced NKI call returned")
        return rid

    def _register(self, t: Any) -> int:
        rid = self._ids.get(id(t))
        if rid is not None:
            return rid
        self._next_id += 1
        rid = self._next_id
        key = id(t)
        self._ids[key] = rid

        def dropped(_: Any, key: int = key, rid: int = rid) -> None:
            if self._ids.get(key) == rid:
                del self._ids[key]
            self._refs.pop(rid, None)
            if self.live:
                self.events.append([DROP, rid])

        self._refs[rid] = weakref.ref(t, dropped)
        return rid

    @staticmethod
    def fn_name(f: Any) -> str | None:
        """The name of an NKI callable (or NumPy operator) passed as an argument (``op=nl.add``)."""
        name = getattr(f, "__nki_boundary__", None)
        if isinstance(name, str) and not name.startswith("Tensor."):
            return name
        short = getattr(f, "__name__", None)
        if isinstance(short, str) and short in NUMPY_OPS and getattr(np, short, None) is f:
            return f"np.{short}"
        return None

    def program(self, kernel_name: str, kernel_file: str, def_line: int, generation: str, target: str,
                grid: tuple[int, ...], problems: list[dict[str, Any]]) -> Program:
        """The traced launch as a ``Program``."""
        return Program(kernel_name, kernel_file, def_line, generation, target, grid, self.input_tensors,
                       self.instances, self.fns, self.locs, len(self.inputs), problems)

    def _loc(self, loc: SourceLocation | None) -> int:
        key = None if loc is None else (loc.path, loc.line, loc.column, loc.end_line, loc.end_column)
        k = self._loc_index.get(key)
        if k is None:
            k = self._loc_index[key] = len(self.locs)
            self.locs.append(loc)
        return k

    def _fn(self, name: str) -> int:
        k = self._fn_index.get(name)
        if k is None:
            k = self._fn_index[name] = len(self.fns)
            self.fns.append(name)
        return k

    # -- the launch --------------------------------------------------------------------------------
    def note_input(self, value: Any, tensor: Any, immutable: bool, name: str) -> None:
        """``kernel._to_tensor`` made ``tensor`` from the launch argument ``value`` (one of ``inputs``)."""
        k = next((i for i, a in enumerate(self.inputs) if a is value), None)
        if k is None:
            raise NkiError("sim_invalid_argument", f"kernel argument '{name}' is an array the verifier did not "
                           "supply", caller_location())
        self.input_tensors.append(Input(self._register(tensor), k, immutable, name))

    def begin_instance(self, pid: tuple[int, ...]) -> None:
        self.events = []
        self.instances.append(Instance(tuple(int(p) for p in pid), self.events))
        self.live = True

    def end_instance(self, result: Any) -> None:
        self.live = False
        try:
            self.instances[-1].result = encode(result, self.tensor_id, self.fn_name)
        except Unencodable as e:
            raise NkiError("sim_sandbox_violation", f"the kernel returned {e}: outputs must be NKI tensors the "
                           "kernel wrote", caller_location()) from None

    # -- one NKI call -------------------------------------------------------------------------------
    def call(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        loc = caller_location()
        try:
            if name == "nl.shared_constant":  # a .npy path is read here, where the kernel runs: programs hold values
                from .ops.memory import load_constant

                args = tuple(load_constant(a) if i == 0 else a for i, a in enumerate(args))
                kwargs = {k: load_constant(v) if k == "constant" else v for k, v in kwargs.items()}
            ea = [encode(a, self.tensor_id, self.fn_name) for a in args]
            ek = [[k, encode(v, self.tensor_id, self.fn_name)] for k, v in kwargs.items()]
            extra = None
            if name == "nl.loop_reduce":
                from .language import _loop_reduce_destination
                from .tensor import Tensor

                dest = _loop_reduce_destination()
                extra = {"dest": encode(dest if isinstance(dest, Tensor) else None, self.tensor_id, self.fn_name)}
        except Unencodable as e:
            raise NkiError("sim_unsupported_api", f"{name.split('.')[-1]}: {e}; kernels pass NKI tensors, index "
                           "expressions, numbers, dtypes and nl/nisa operators to NKI calls", loc) from None
        event: list[Any] = [CALL, self._fn(name), self._loc(loc), ea, ek, None, 0, extra]
        self.depth += 1
        try:
            out = fn(*args, **kwargs)
        except BaseException:
            event[6] = 1  # it raised: the kernel may catch it; the executor expects the same
            self.emit(event)
            raise
        finally:
            self.depth -= 1
        spec, out = self._result(out, 0)
        event[5] = spec
        self.emit(event)
        return out

    def _result(self, out: Any, depth: int) -> tuple[Any, Any]:
        """The result's spec (new tensor ids, loop ids) and the value handed to the kernel."""
        from .tensor import Tensor

        if isinstance(out, Tensor):
            return {"t": self._register(out)}, out
        if isinstance(out, types.GeneratorType):
            self._next_loop += 1
            return {"lp": self._next_loop}, _Loop(self, self._next_loop, out)
        if isinstance(out, (tuple, list)) and depth < 4 and any(isinstance(x, (Tensor, tuple, list)) for x in out):
            pairs = [self._result(x, depth + 1) for x in out]
            vals = [v for _, v in pairs]
            kind = "tu" if isinstance(out, tuple) else "li"
            return {kind: [s for s, _ in pairs]}, (tuple(vals) if isinstance(out, tuple) and type(out) is tuple
                                                   else out if isinstance(out, tuple) else vals)
        return None, out


# NumPy callables kernels pass as ALU operators (``op=np.add``); resolved by name in the executor. Read from the
# module's own dict: ``getattr`` over ``dir(np)`` imports every lazy submodule (f2py, testing, ctypeslib, ...),
# ~140 ms in each worker, for the same 106 ufuncs
NUMPY_OPS = tuple(sorted({k for k, v in vars(np).items() if isinstance(v, np.ufunc)}
                         | {"sum", "max", "min", "amax", "amin", "prod", "mean", "maximum", "minimum"}))
