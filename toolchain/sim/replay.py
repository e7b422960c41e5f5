"""Executing a traced program on real inputs, in a process that never loads user code.

``execute(program, arrays)`` runs one launch the way ``kernel.launch`` does — a fresh simulation,
input tensors over the given arrays, every SPMD instance, the same output checks — except that the
kernel body is the program's events instead of the kernel's Python: each ``CALL`` resolves its API
name in this process's own table (``nl.*`` / ``nisa.*`` of the program's generation, the tensor's
methods, NumPy's operators; nothing else), decodes its arguments (``program.decode``: tensor ids
must name tensors this replay holds), and calls the simulator with the event's source location
standing in for the user's frame (``location.set_replay_location``), so every check, error message,
store-log line and cost-model instruction is the one a direct simulation would give. Results must
have the shape the event recorded (new tensor ids, loops); anything else is a ``ProgramError``: the
program did not come from an honest trace. Values the program never saw (the seed's inputs) are
here only; the kernel's process has no way to learn them.

``ProgramKernel`` puts a program where ``verify.run_cases`` expects a kernel, so the executor worker
judges seeds exactly as before (``roles.executor_role``).
"""

from __future__ import annotations

import linecache
from typing import Any

import numpy as np

from nki_agent.toolchain.facts.errors import NkiError
from ..location import reset_replay_location, set_replay_location
from . import runtime
from .compile_checks import program_returns_outputs
from .kernel import (DEFAULTS, LaunchDefaults, LaunchRecord, _check_grid, begin_instance, finish_launch,
                     input_tensor, instances_of, new_launch, to_numpy_input)
from nki_agent.toolchain.protocol.program import CALL, CLOSE, DROP, NEXT, Names, Program, ProgramError, decode
from .tensor import Tensor, storage_of

_MODULES: dict[str, dict[str, Any]] = {}


def _namespaces(generation: str) -> dict[str, Any]:
    """This process's own ``nl`` / ``nisa`` namespaces of one generation (built once, never the kernel's)."""
    ns = _MODULES.get(generation)
    if ns is None:
        from ..shim import build_modules

        root = "neuronxcc.nki" if generation == runtime.CLASSIC else "nki"
        mods = build_modules()
        ns = _MODULES[generation] = {"nl": vars(mods[f"{root}.language"]), "nisa": vars(mods[f"{root}.isa"])}
    return ns


def resolve(name: str, generation: str) -> Any:
    """An API name of a program → the callable of this process (``ProgramError`` for anything else)."""
    from .record import NUMPY_OPS
    from .tensor import _TRACED_METHODS, _TRACED_OPERATORS

    prefix, _, attr = name.partition(".")
    if prefix in ("nl", "nisa"):
        fn = _namespaces(generation)[prefix].get(attr)
        if callable(fn) and hasattr(fn, "__nki_boundary__"):
            return fn
    elif prefix == "Tensor" and attr in _TRACED_METHODS + _TRACED_OPERATORS:
        return getattr(Tensor, attr)
    elif prefix == "np" and attr in NUMPY_OPS:
        return getattr(np, attr)
    raise ProgramError(f"the program calls {name!r}, which is not an NKI API")


def _enum(cls: str, member: str) -> Any:
    from .isa_api import _ENUMS

    import enum

    for v in _ENUMS.values():
        if isinstance(v, type) and issubclass(v, enum.Enum) and v.__name__ == cls and member in v.__members__:
            return v.__members__[member]
    raise ProgramError(f"unknown NKI enum value {cls}.{member}")


class _Replay:
    """The executor's state for one launch: tensors by id, loops by id, resolved API names."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.fns = [resolve(n, program.generation) for n in program.fns]
        self.tensors: dict[int, Any] = {}
        self.loops: dict[int, Any] = {}
        self.top = 0
        self.names = Names(self._tensor, lambda n: resolve(n, program.generation), _enum)

    def _tensor(self, rid: int) -> Any:
        t = self.tensors.get(rid)
        if t is None:
            raise ProgramError(f"tensor #{rid} is used but was never created (or was already dropped)")
        return t

    def bind(self, spec: Any, out: Any, depth: int = 0) -> None:
        """Give the call's results the ids the trace gave them."""
        if spec is None:
            return
        if not isinstance(spec, dict) or len(spec) != 1 or depth > 4:
            raise ProgramError("malformed result")
        (kind, body), = spec.items()
        if kind == "t":
            if not isinstance(out, Tensor) or not isinstance(body, int):
                raise ProgramError("a call's result does not match the trace")
            known = self.tensors.get(body)
            if known is not None:
                if known is not out:
                    raise ProgramError("a call's result does not match the trace")
                return
            if body <= self.top:
                raise ProgramError("tensor ids must be new")
            self.top = body
            self.tensors[body] = out
        elif kind == "lp":
            if not isinstance(body, int) or body in self.loops or not hasattr(out, "__next__"):
                raise ProgramError("a call's result does not match the trace")
            self.loops[body] = out
        elif kind in ("tu", "li"):
            if not isinstance(out, (tuple, list)) or not isinstance(body, list) or len(body) != len(out):
                raise ProgramError("a call's result does not match the trace")
            for s, o in zip(body, out):
                self.bind(s, o, depth + 1)
        else:
            raise ProgramError("malformed result")

    def run(self, events: list[Any]) -> None:
        program = self.program
        for ev in events:
            if not isinstance(ev, list) or not ev:
                raise ProgramError("malformed event")
            kind = ev[0]
            if kind == CALL:
                self.call(ev)
            elif kind == NEXT and len(ev) == 2:
                it = self.loops.get(ev[1])
                if it is None:
                    raise ProgramError("a step of a loop that does not exist")
                next(it, None)
            elif kind == CLOSE and len(ev) == 2:
                it = self.loops.pop(ev[1], None)
                if it is not None:
                    it.close()
            elif kind == DROP and len(ev) == 2:
                self.tensors.pop(ev[1], None)
            else:
                raise ProgramError("malformed event")
        del program

    def call(self, ev: list[Any]) -> None:
        if len(ev) != 8:
            raise ProgramError("malformed call")
        _, fi, li, ea, ek, spec, raised, extra = ev
        if not isinstance(fi, int) or not 0 <= fi < len(self.fns) or not isinstance(li, int) \
                or not 0 <= li < len(self.program.locs) or not isinstance(ea, list) or not isinstance(ek, list):
            raise ProgramError("malformed call")
        fn, loc = self.fns[fi], self.program.locs[li]
        args = [decode(a, self.names) for a in ea]
        kwargs: dict[str, Any] = {}
        for pair in ek:
            if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[0], str):
                raise ProgramError("malformed keyword argument")
            kwargs[pair[0]] = decode(pair[1], self.names)
        dest_token = None
        if isinstance(extra, dict) and "dest" in extra:
            from .language import REPLAY_DESTINATION

            dest_token = REPLAY_DESTINATION.set(decode(extra["dest"], self.names))
        token = set_replay_location(loc)
        try:
            out = fn(*args, **kwargs)
        except NkiError as e:
            if raised:
                return  # the kernel caught it
            if e.location is None:
                e.location = loc
            raise
        except ProgramError:
            raise
        except MemoryError:
            raise
        except Exception as e:  # noqa: BLE001 - the simulator refused the call in a way the trace did not see
            if raised:
                return
            raise NkiError("sim_python_exception", f"{type(e).__name__}: {e}", loc) from e
        finally:
            reset_replay_location(token)
            if dest_token is not None:
                from .language import REPLAY_DESTINATION

                REPLAY_DESTINATION.reset(dest_token)
        if not raised:
            self.bind(spec, out)

    def result(self, enc: Any) -> Any:
        """What the instance returned: tensors (in tuples / lists / dicts) or None, nothing computed elsewhere."""
        value = decode(enc, self.names)
        if not _only_tensors(value):
            raise NkiError("sim_sandbox_violation", "the kernel returned something that is not an NKI tensor: outputs "
                           "must be NKI tensors the kernel wrote (e.g. nl.ndarray(..., buffer=nl.shared_hbm) filled "
                           "with nl.store / nisa.dma_copy)", self.program.locs[-1] if self.program.locs else None)
        return value


def _only_tensors(v: Any, depth: int = 0) -> bool:
    if v is None or isinstance(v, Tensor):
        return True
    if depth < 4 and isinstance(v, (tuple, list)):
        return all(_only_tensors(x, depth + 1) for x in v)
    if depth < 4 and isinstance(v, dict):
        return all(_only_tensors(x, depth + 1) for x in v.values())
    return False


class _ProgramKernelFacts:
    """What ``kernel._check_grid`` reads of a kernel."""

    def __init__(self, program: Program) -> None:
        self.generation = program.generation
        self.__name__ = program.kernel_name
        self.func = None


def execute(program: Program, arrays: list[Any], defaults: LaunchDefaults | None = None) -> Any:
    """Run ``program`` on ``arrays`` (the launch's inputs, then model parameters); NumPy outputs as the
    launch returns them. Inputs the program wrote are written back into ``arrays`` (``_write_back``)."""
    defaults = defaults or DEFAULTS.get()
    if program.generation not in (runtime.CLASSIC, runtime.NEW):
        raise ProgramError(f"unknown API generation {program.generation!r}")
    if program.n_inputs != len(arrays):
        raise ProgramError(f"the program was traced with {program.n_inputs} arrays, not {len(arrays)}")
    from nki_agent.toolchain.facts.targets import get_target

    try:
        target = get_target(defaults.target or program.target).name
    except (KeyError, ValueError):
        raise ProgramError(f"unknown target {program.target!r}") from None
    sim = new_launch(target, program.generation, program.grid, defaults)
    _check_grid(sim.target, _ProgramKernelFacts(program), program.grid)  # type: ignore[arg-type]
    sim.kernel_file = program.kernel_file
    sim.strict_params = program_returns_outputs([inst.result for inst in program.instances])
    if sim.tracer is not None:
        sim.tracer.trace.kernel_file = sim.kernel_file
    record = LaunchRecord(program.kernel_name, sim.target.name, program.generation, program.grid)
    replay = _Replay(program)
    instances = instances_of(program.grid)
    if len(instances) != len(program.instances):
        raise ProgramError("the program's instances do not match its grid")
    with runtime.activate(sim), np.errstate(all="ignore"):
        inputs: list[tuple[Any, int]] = []
        for inp in program.inputs:
            if not 0 <= inp.index < len(arrays) or inp.tensor in replay.tensors:
                raise ProgramError("malformed program inputs")
            arr = to_numpy_input(arrays[inp.index])
            if arr is None:
                raise ProgramError("an input is not an array")
            t = input_tensor(arr, inp.name, program.generation, not inp.immutable)
            replay.bind({"t": inp.tensor}, t)
            inputs.append((t, inp.index))
        result: Any = None
        for n, (inst, pid) in enumerate(zip(program.instances, instances)):
            if tuple(inst.pid) != tuple(pid):
                raise ProgramError("the program's instances do not match its grid")
            begin_instance(sim, n, pid)
            replay.run(inst.events)
            result = replay.result(inst.result)
        for it in list(replay.loops.values()):
            it.close()
        outputs = finish_launch(sim, record, result)
        record.mutated_inputs = [inp.name for inp, (t, _) in zip(program.inputs, inputs) if storage_of(t).mutated]
        for t, k in inputs:
            st = storage_of(t)
            dst = arrays[k]
            if st.mutated and isinstance(dst, np.ndarray) and dst.flags.writeable and dst.shape == st.array.shape \
                    and dst.dtype == st.array.dtype:
                dst[...] = st.array
    record.outputs = outputs
    if defaults.observer is not None:
        defaults.observer(record)
    return outputs


def use_source(path: str, text: str) -> None:
    """The kernel file's text for messages (``location.ast_context``), without the file being readable here."""
    lines = text.splitlines(True)
    linecache.cache[path] = (len(text), None, lines, path)


class ProgramKernel:
    """A traced program where ``verify.run_cases`` expects a kernel: ``task.launcher`` indexes it with the
    grid (the program carries its own) and calls it with each seed's arrays."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.generation = program.generation
        self.__name__ = program.kernel_name
        self.func = None
        self.options: dict[str, Any] = {}

    def __getitem__(self, grid: Any) -> "ProgramKernel":
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise ProgramError("a traced program takes its arrays positionally")
        try:
            return execute(self.program, list(args))
        except ProgramError as e:
            raise NkiError("sim_sandbox_violation", f"the kernel's traced program does not replay: {e}",
                           self.program.locs[0] if self.program.locs else None) from None


class ProgramDispatch:
    """The kernel ``run_cases`` sees when each seed runs the program traced for its arrays' signature:
    ``program`` is set before each seed's launch."""

    func = None
    options: dict[str, Any] = {}

    def __init__(self) -> None:
        self.program: ProgramKernel | None = None

    @property
    def generation(self) -> str:
        return self.program.generation if self.program is not None else runtime.NEW

    @property
    def def_line(self) -> int:
        return self.program.program.def_line if self.program is not None else 1

    @property
    def __name__(self) -> str:  # type: ignore[override]
        return self.program.__name__ if self.program is not None else "kernel"

    def __getitem__(self, grid: Any) -> Any:
        return self

    def __call__(self, *args: Any) -> Any:
        if self.program is None:
            raise NkiError("sim_worker_crash", "a seed arrived without its traced program", None)
        return self.program(*args)
