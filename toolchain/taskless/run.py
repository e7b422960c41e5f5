"""The worker's ``taskless`` op (``run_job``): run a kernel file as its request says — its ``__main__`` driver
(``python FILE`` with ``neuronxcc.nki`` / ``nki`` bound to the simulator), a pytest test through ``pytest.main``
(the kernel module it imports answered by the buffer's copy), or its shape lines' synthesised inputs — with every
top-level launch observed, and describe what ran in ``SimulateResult`` form; a driver's / test's exception
becomes the problem it is (``_problem_of``). ``contained`` puts the process back after an in-process run.

Executes user code: it must only ever run in the sandboxed worker (``sandbox.py``) or, for trusted callers, in
process. Like every worker module it writes plain JSON and does not import pydantic."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import sys
import time
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .plan import MAIN, SHAPES, TEST, _same
from .shape_lines import shape_specs, synthesise
from .source import kernel_defs, parse


@dataclass
class _Launch:
    kernel: str
    file: str
    inputs: list[dict[str, Any]]
    grid: list[int]
    record: Any = None
    line: int = 0  # the driver's line that led to it (the outermost frame of the kernel file; 0: none)


def _driver_line(path: str) -> int:
    """The line of the outermost frame of ``path`` on the stack (its ``__main__`` statement, or the test's
    call into the file): where a note about this launch belongs when it is not the kernel's fault."""
    frame = sys._getframe(1)
    line = 0
    while frame is not None:
        if frame.f_code.co_filename == path:
            line = frame.f_lineno
        frame = frame.f_back  # type: ignore[assignment]
    return line


def _spec(value: Any) -> dict[str, Any]:
    from nki_agent.toolchain.facts import dtypes
    from ..sim.kernel import to_numpy_input

    try:
        arr = to_numpy_input(value)
    except Exception:  # noqa: BLE001 - an odd object a driver passes: described by its type
        arr = None
    if arr is None:
        return {"shape": None, "dtype": type(value).__name__, "value": repr(value)[:80]}
    return {"shape": [int(d) for d in arr.shape], "dtype": dtypes.name(arr.dtype)}


def _arg_specs(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    """One spec per parameter of ``func`` in signature order (``*args`` / ``**kwargs`` left out)."""
    import inspect

    try:
        sig = inspect.signature(func)
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
    except (TypeError, ValueError):
        return [_spec(a) for a in args]
    return [_spec(bound.arguments[n]) for n, p in sig.parameters.items()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and n in bound.arguments]


@contextlib.contextmanager
def _observing(launches: list[_Launch], target: str | None, time_limit: float | None, path: str = "") -> Iterator[None]:
    """Every top-level kernel launch in the block is recorded (kernel, file, argument specs, the driver's line in
    ``path``, its record); the first launch of ``path``'s kernels that completes is traced for the cost model
    (later ones are not: a benchmark loop pays nothing for it)."""
    from ..sim import kernel as K
    from ..sim import runtime

    original = K.launch

    def launch(kernel: Any, grid: tuple[int, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if runtime.current() is not None:
            return original(kernel, grid, args, kwargs)
        code = getattr(kernel.func, "__code__", None)
        file = code.co_filename if code else ""
        launches.append(_Launch(kernel.__name__, file, _arg_specs(kernel.func, args, kwargs), list(grid),
                                line=_driver_line(path) if path else 0))
        traced = bool(path) and _same(file, path) and not any(x.record is not None and x.record.instruction_trace
                                                                is not None for x in launches)
        token = K.DEFAULTS.set(dataclasses.replace(K.DEFAULTS.get(), trace=traced))
        try:
            return original(kernel, grid, args, kwargs)
        finally:
            K.DEFAULTS.reset(token)

    def observe(rec: Any) -> None:
        pending = [x for x in launches if x.record is None]
        if pending:
            pending[-1].record = rec

    K.launch = launch  # type: ignore[assignment]
    token = K.DEFAULTS.set(K.LaunchDefaults(target=target, time_limit=time_limit, observer=observe))
    try:
        yield
    finally:
        K.DEFAULTS.reset(token)
        K.launch = original  # type: ignore[assignment]


_REFUSED = {errno.EPERM, errno.EACCES, errno.EROFS, errno.ENETUNREACH, errno.EAGAIN, errno.ENOSYS}


def _problem_of(e: BaseException, via: str, path: str) -> dict[str, Any] | None:
    """The problem a driver's / test's exception is: an NKI error as it is, a failed check as a wrong
    result at the line that failed, anything else as a Python exception there."""
    from nki_agent.toolchain.facts.errors import NkiError, Problem, SourceLocation
    from ..location import traceback_location

    what = {MAIN: "the __main__ driver", TEST: "the test"}.get(via, "the run")
    loc = traceback_location(e.__traceback__) or SourceLocation(path, 1)
    if isinstance(e, NkiError):
        return Problem.from_error(e).as_dict()
    if isinstance(e, SystemExit):
        if e.code in (None, 0):
            return None
        return Problem("sim_wrong_result", f"{what} exited with status {e.code!r}: its own check failed", location=loc).as_dict()
    if isinstance(e, AssertionError):
        detail = str(e).strip()
        detail = (": " + detail[:600]) if detail else ""
        return Problem("sim_wrong_result", f"{what}'s check failed (AssertionError){detail}", location=loc).as_dict()
    if isinstance(e, MemoryError):
        return Problem("sim_memory_limit", f"{what} exceeded the simulation memory limit", location=loc).as_dict()
    note = ""
    if isinstance(e, OSError) and e.errno in _REFUSED:
        note = (" (the sandbox refuses it: kernels and their drivers run with no new processes, no network, and "
                "nothing writable outside a private temporary folder)")
    return Problem("sim_python_exception", f"{type(e).__name__} in {what}: {str(e)[:600]}{note}", location=loc).as_dict()


def _add_problem(problems: list[dict[str, Any]], e: BaseException, via: str, path: str) -> None:
    """``e`` (raised by the user's driver, test or kernel) as a problem; Ctrl-C is not the user's error."""
    if isinstance(e, KeyboardInterrupt):
        raise e
    p = _problem_of(e, via, path)
    if p is not None:
        problems.append(p)


def _exec_file(path: str, name: str, search_path: Sequence[str]) -> types.ModuleType:
    """Compile and run a user file as module ``name`` (the simulator's NKI modules must be installed)."""
    from nki_agent.toolchain.facts.errors import NkiError, SourceLocation
    from ..tasks import _put_on_path, _read_source, search_dirs

    source = _read_source(path)
    try:
        code = compile(source, path, "exec")
    except SyntaxError as e:
        loc = SourceLocation(path, e.lineno or 1, e.offset or 1, e.end_lineno, e.end_offset)
        raise NkiError("sim_syntax_error", f"SyntaxError: {e.msg}", loc) from None
    module = types.ModuleType(name)
    module.__file__ = path
    _put_on_path(search_dirs(path, search_path))
    sys.modules[name] = module
    exec(code, module.__dict__)
    return module


def _run_main(req: dict[str, Any], extra: list[str], problems: list[dict[str, Any]]) -> None:
    path = req["kernel"]
    sys.argv = [path]
    try:
        _exec_file(path, "__main__", extra)
    except BaseException as e:
        _add_problem(problems, e, MAIN, path)


class _PytestCollector:
    """A pytest plugin keeping each failure's exception (with its traceback) and each test's outcome."""

    def __init__(self) -> None:
        self.failures: list[BaseException] = []
        self.outcomes: list[tuple[str, str]] = []

    def pytest_exception_interact(self, node: Any, call: Any, report: Any) -> None:
        if call is not None and call.excinfo is not None:
            self.failures.append(call.excinfo.value)

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call" or report.outcome != "passed":
            self.outcomes.append((report.nodeid, report.outcome))


def _load_kernel_module(path: str, names: list[str], extra: list[str]) -> None:
    """The kernel file, loaded once, answers every name it is imported by (so a test gets this copy)."""
    import importlib

    if not names:
        return
    module = _exec_file(path, names[0], extra)
    for dotted in names[1:]:
        parent_name, _, last = dotted.rpartition(".")
        try:
            parent = importlib.import_module(parent_name)
        except Exception:  # noqa: BLE001 - a package that does not import: the plain name still works
            continue
        sys.modules[dotted] = module
        setattr(parent, last, module)


def _run_test(req: dict[str, Any], extra: list[str], problems: list[dict[str, Any]]) -> None:
    from nki_agent.toolchain.facts.errors import Problem, SourceLocation

    path, test = req["kernel"], str(req.get("test") or "")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the workspace's tests, not every installed plugin
    try:
        import pytest
    except ImportError:
        problems.append(Problem("sim_task_error", f"pytest is not installed where kernels run; cannot run {test}",
                                location=SourceLocation(path, 1)).as_dict())
        return
    try:
        _load_kernel_module(path, [n for n in req.get("modules") or [] if isinstance(n, str)], extra)
    except BaseException as e:
        _add_problem(problems, e, TEST, path)
        return
    collector = _PytestCollector()
    args = [test, "-q", "-x", "-p", "no:cacheprovider", "-p", "no:stepwise", "-o", "addopts=", "--no-header"]
    rootdir = req.get("rootdir")
    if isinstance(rootdir, str) and rootdir:
        args.append(f"--rootdir={rootdir}")
    try:
        code = pytest.main(args, plugins=[collector])
    except BaseException as e:
        _add_problem(problems, e, TEST, path)
        return
    for failure in collector.failures[:1]:
        p = _problem_of(failure, TEST, path)
        if p is not None:
            problems.append(p)
    if not collector.failures and int(code) not in (0,):
        why = {5: "collected no test", 4: "could not be started (usage error)", 3: "hit an internal error",
               2: "was interrupted (collection error?)"}.get(int(code), f"exited with status {int(code)}")
        problems.append(Problem("sim_task_error", f"pytest {why} for {test}", location=SourceLocation(path, 1)).as_dict())


def _run_shapes(req: dict[str, Any], extra: list[str], problems: list[dict[str, Any]]) -> None:
    import numpy as np

    from nki_agent.toolchain.facts.errors import NkiError, Problem, SourceLocation
    from ..tasks import _read_source, find_kernel

    path = req["kernel"]
    text = _read_source(path)
    specs, _ = shape_specs(text)
    module = _exec_file(path, "nki_agent_kernel", extra)
    rng = np.random.default_rng(0)
    order = {k.name: k.line for k in kernel_defs(parse(text), text)}
    for spec in sorted(specs.values(), key=lambda s: order.get(s.kernel, s.line)):
        try:
            kernel = find_kernel(module, spec.kernel)
            kwargs = {a.name: synthesise(a, rng) for a in spec.args}
            (kernel[spec.grid] if spec.grid else kernel)(**kwargs)
        except NkiError as e:
            problems.append(Problem.from_error(e).as_dict())
        except Exception as e:  # noqa: BLE001 - a shape line the kernel does not accept
            loc = SourceLocation(path, spec.line, 1)
            problems.append(Problem("sim_python_exception", f"{type(e).__name__} running `{spec.kernel}` on the shape "
                                    f"line's inputs: {str(e)[:600]}", location=loc).as_dict())


def _summary(a: Any) -> dict[str, Any]:
    from nki_agent.toolchain.judging.simulate import _summary as summary
    from nki_agent.toolchain.judging.verify import _to_np

    return summary(_to_np(a))


def run_job(req: dict[str, Any]) -> dict[str, Any]:
    """The worker's ``taskless`` op: run the kernel file as ``req["via"]`` says (``main`` / ``test`` /
    ``shapes``) and describe what ran, in ``SimulateResult`` form. Executes user code: sandboxed worker only
    (or ``in_process``, for trusted callers)."""
    from dataclasses import asdict as as_dict

    from nki_agent.toolchain.facts.errors import NkiError, Problem
    from ..shim import install
    from ..tasks import search_path
    from nki_agent.toolchain.judging.verify import _as_list

    path, via = str(req["kernel"]), str(req.get("via", ""))
    extra = search_path(req)
    out: dict[str, Any] = {"op": "simulate", "kernel": path, "task": "", "via": via, "ran": False, "problems": [],
                           "outputs": [], "via_test": str(req.get("test_label") or "")}
    problems: list[dict[str, Any]] = out["problems"]
    launches: list[_Launch] = []
    runner = {MAIN: _run_main, TEST: _run_test, SHAPES: _run_shapes}.get(via)
    if runner is None:
        problems.append(Problem("sim_bad_input", f"unknown way to run a kernel without a task: {via!r}").as_dict())
        return out
    install()
    time_limit = req.get("time_limit")
    t0 = time.perf_counter()
    try:
        with _observing(launches, req.get("target"), float(time_limit) if time_limit else None, path):
            runner(req, extra, problems)
    except NkiError as e:
        problems.append(Problem.from_error(e).as_dict())
    except BaseException as e:
        _add_problem(problems, e, via, path)
    out["seconds"] = time.perf_counter() - t0
    mine = [x for x in launches if _same(x.file, path)]
    cut_off(problems, [_launch_view(x) for x in mine], path, via)
    ours = [x for x in mine if x.record is not None]
    trace: list[dict[str, Any]] = []
    for x in ours:
        trace.extend(as_dict(t) for t in x.record.trace[:2000 - len(trace)])
    out["launches"] = [{"kernel_name": x.kernel, "inputs": x.inputs, "grid": x.grid, "completed": x.record is not None,
                        "outputs": [_summary(r) for r in _as_list(x.record.outputs) if r is not None][:16]
                        if x.record is not None else []} for x in mine[:64]]
    if mine:
        out.update(kernel_name=mine[0].kernel, inputs=mine[0].inputs, grid=mine[0].grid)
    if ours:
        first = ours[0]
        rec = first.record
        out.update(ran=True, kernel_name=first.kernel, inputs=first.inputs,
                   outputs=[_summary(r) for r in _as_list(rec.outputs) if r is not None][:16],
                   target=rec.target, generation=rec.generation, grid=list(rec.grid), trace=trace,
                   peak_sbuf_bytes=max(x.record.peak_sbuf_bytes for x in ours),
                   peak_psum_bytes=max(x.record.peak_psum_bytes for x in ours),
                   instructions=sum(x.record.instructions for x in ours))
        traced = next((x.record for x in ours if x.record.instruction_trace is not None), None)
        if traced is not None:  # the cost model's estimate of the first launch, as a task's simulation has
            out["estimate"] = _estimate(traced, req)
        seen = set()
        for x in ours:  # the launches' warnings (memory pressure, on-chip outputs), once each
            for w in x.record.warnings:
                p = Problem.from_error(w).as_dict()
                key = (p["code"], str(p["location"]))
                if key not in seen:
                    seen.add(key)
                    problems.append(p)
    return out


@dataclass(frozen=True)
class LaunchView:
    """What ``cut_off`` needs of one launch of the file: its kernel, argument specs, the driver's line, and
    whether it completed."""

    kernel: str
    inputs: list[dict[str, Any]]
    line: int
    completed: bool


def _launch_view(x: _Launch) -> LaunchView:
    return LaunchView(x.kernel, x.inputs, x.line, x.record is not None)


def _signature(v: LaunchView) -> str:
    return v.kernel + "(" + ", ".join(f"{i['dtype']}{i['shape']}" if i.get("shape") is not None else str(i.get("dtype"))
                                       for i in v.inputs) + ")"


def cut_off(problems: list[dict[str, Any]], launches: Sequence[LaunchView], path: str, via: str) -> None:
    """A limit of the simulator (``errors.TOOL_LIMITS``: its memory cap, its time limit, no device to time a
    benchmark on) that stopped the run after
    a launch of the file completed is not the kernel's error: the problem becomes an information note at the
    driver's line saying what was cut off and what ran before it (in place, in ``problems``). A limit hit before
    any launch completed stays as it is (nothing ran to compare with: a kernel that cannot run at its only shape)."""
    from nki_agent.toolchain.facts.errors import TOOL_LIMITS, Problem, SourceLocation

    done = [v for v in launches if v.completed]
    if not done:
        return
    what = {MAIN: "the __main__ driver", TEST: "the test"}.get(via, "the run")
    for i, p in enumerate(problems):
        if p.get("code") not in TOOL_LIMITS or p.get("severity") != "error":
            continue
        stopped = next((v for v in reversed(launches) if not v.completed), None)
        loc = p.get("location") or {}
        line = stopped.line if stopped is not None and stopped.line else \
            int(loc.get("line") or 0) if _same(str(loc.get("path", "")), path) else done[-1].line
        at = f" at its launch of {_signature(stopped)}" if stopped is not None else ""
        ran = f"{len(done)} launch{'es' if len(done) > 1 else ''} of this file completed before it (first: " \
              f"{_signature(done[0])})"
        message = f"cut off: {TOOL_LIMITS[p['code']]} stopped {what} here{at} — a limit of the tool, not an error " \
                  f"of the kernel ({p.get('message', '')}); {ran}, and everything it did up to this line passed"
        problems[i] = Problem(p["code"], message, "info", SourceLocation(path, max(line, 1), 1)).as_dict()


def _estimate(rec: Any, req: dict[str, Any]) -> dict[str, Any] | None:
    """The cost model's estimate of a traced launch (``judging.simulate.estimate_json``, with the user's
    calibration the request carries), as a task's simulation has it."""
    from nki_agent.toolchain.judging.simulate import estimate_json

    calibration = None
    if req.get("cost_constants") is not None:
        from nki_agent.toolchain.cost.calibration import parse_overrides

        try:
            calibration = parse_overrides(req.get("cost_constants"))
        except Exception:  # noqa: BLE001 - a malformed calibration: the documented constants, the run still counts
            calibration = None
    return estimate_json(rec, calibration=calibration)


@contextlib.contextmanager
def contained() -> Iterator[None]:
    """For an in-process run: what it prints goes to stderr (stdout may be a JSON answer); afterwards
    ``__main__``, ``sys.argv``, ``sys.path``, the simulator modules and whatever modules the run imported are
    put back (trusted callers only: the code still runs in this process)."""
    from ..shim import install, uninstall

    saved_modules = dict(sys.modules)
    saved_argv, saved_path = list(sys.argv), list(sys.path)
    saved_env = os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    shim = install()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        uninstall(shim)
        for name in [n for n in sys.modules if n not in saved_modules]:
            del sys.modules[name]
        sys.modules.update(saved_modules)
        sys.argv[:], sys.path[:] = saved_argv, saved_path
        if saved_env is None:
            os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
        else:
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = saved_env


__all__ = ["LaunchView", "contained", "cut_off", "run_job"]
