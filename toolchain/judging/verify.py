"""Correctness verification of a kernel against its task reference, on several seeds, in this process.

Per seed: seed numpy/random/torch, draw inputs, run the reference on copies, run the kernel on the
simulator (low-precision inputs stay low precision), compare with dtype-aware tolerances, and
locate the first mismatching element and the tile that holds it. A kernel that changes its inputs
fails unless the task allows it. Callers that do not trust the code use ``sandbox.run`` instead.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.facts.errors import NkiError, Problem, SourceLocation
from nki_agent.toolchain.tasks import Task, find_kernel, load_module, load_task

if TYPE_CHECKING:  # the simulator is imported where it runs: the reference role draws inputs without it
    from nki_agent.toolchain.sim.kernel import Kernel, LaunchRecord

# Default tolerances by output precision (KernelBench's policy, widened for fp8's 3-bit mantissa).
TOLERANCES = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2),
              "float8_e4m3": (1e-1, 1e-1), "float8_e5m2": (2e-1, 2e-1), "float8_e4m3fn": (1e-1, 1e-1)}
DEFAULT_SEEDS = 3
PMAX = 128  # partition tile height used to map an element to its tile


@dataclass
class Mismatch:
    """The first element that differs, and where it sits in the kernel's tiling."""

    output: int
    index: list[int]
    got: float
    expected: float
    tile: list[int]
    offset_in_tile: list[int]
    map: dict[str, Any] | None = None  # mismatch_map(): counts of differing elements, partition x free bins


MAP_ROWS, MAP_COLS = 16, 32  # bins of the mismatch map (bounded: a handful of ints per failing output)


def mismatch_map(bad: np.ndarray) -> dict[str, Any]:
    """Where the differing elements of one output are: their counts over at most MAP_ROWS partition bins x
    MAP_COLS free bins (axis 0 is the partition axis; the other axes, flattened, the free one)."""
    b = bad.reshape(bad.shape[0], -1) if bad.ndim else bad.reshape(1, 1)
    parts, free = b.shape
    pe = np.linspace(0, parts, min(MAP_ROWS, parts) + 1).astype(int)[:-1]
    fe = np.linspace(0, free, min(MAP_COLS, free) + 1).astype(int)[:-1]
    counts = np.add.reduceat(np.add.reduceat(b.astype(np.int64), pe, axis=0), fe, axis=1)
    return {"partitions": int(parts), "free": int(free), "row_starts": [int(x) for x in pe],
            "col_starts": [int(x) for x in fe], "counts": counts.tolist()}


@dataclass
class SeedResult:
    seed: int
    correct: bool
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    mismatches: int = 0
    elements: int = 0
    first_mismatch: Mismatch | None = None
    kernel_seconds: float = 0.0
    reference_seconds: float = 0.0
    message: str = ""


@dataclass
class VerifyResult:
    """Outcome of ``verify``: compiled -> correct, with error figures and problems."""

    kernel: str
    task: str
    target: str
    generation: str = ""
    compiled: bool = False
    correct: bool = False
    seeds: list[SeedResult] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    atol: float = 0.0
    rtol: float = 0.0
    peak_sbuf_bytes: int = 0
    peak_psum_bytes: int = 0
    trace: list[dict[str, Any]] = field(default_factory=list)
    estimate: dict[str, Any] | None = None  # the cost model's estimate of the first case (CostEstimate JSON)

    @property
    def max_abs_error(self) -> float:
        return max((s.max_abs_error for s in self.seeds), default=0.0)

    @property
    def max_rel_error(self) -> float:
        return max((s.max_rel_error for s in self.seeds), default=0.0)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["problems"] = [p.as_dict() for p in self.problems]
        d["max_abs_error"] = self.max_abs_error
        d["max_rel_error"] = self.max_rel_error
        d["mismatches"] = sum(s.mismatches for s in self.seeds)
        return d


def tolerance_for(task: Task, outputs: list[np.ndarray]) -> tuple[float, float]:
    worst = (0.0, 0.0)
    for o in outputs:
        a, r = TOLERANCES.get(dtypes.name(o.dtype), (1e-4, 1e-4))
        worst = (max(worst[0], a), max(worst[1], r))
    return task.tolerance.get("atol", worst[0]), task.tolerance.get("rtol", worst[1])


def _as_list(x: Any) -> list[Any]:
    if isinstance(x, (tuple, list)):
        return list(x)
    return [x]


def _to_np(x: Any) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x) if not x.flags.c_contiguous else x.copy()
    from nki_agent.toolchain.sim.kernel import to_numpy_input

    arr = to_numpy_input(x)
    if arr is None:
        arr = np.asarray(x)
    return arr


def compare(got: np.ndarray, exp: np.ndarray, atol: float, rtol: float, out_idx: int) -> SeedResult:
    res = SeedResult(seed=0, correct=True)
    if got.shape != exp.shape:
        if got.size == exp.size:
            got = got.reshape(exp.shape)
        else:
            res.correct = False
            res.message = f"output {out_idx} has shape {list(got.shape)}, reference has {list(exp.shape)}"
            return res
    g = got.astype(np.float64)
    e = exp.astype(np.float64)
    with np.errstate(all="ignore"):
        ok = _close(g, e, atol, rtol, res)
    res.elements = int(g.size)
    res.mismatches = int(g.size - np.count_nonzero(ok))
    if res.mismatches:
        res.correct = False
        idx = [int(i) for i in np.argwhere(~ok)[0]]
        tile = [idx[0] // PMAX] + ([] if len(idx) < 2 else [0] * (len(idx) - 1))
        res.first_mismatch = Mismatch(out_idx, idx, float(g[tuple(idx)]), float(e[tuple(idx)]),
                                      tile, [idx[0] % PMAX] + idx[1:], mismatch_map(~ok))
        nan = bool(np.isnan(g[tuple(idx)]))
        res.message = (f"{res.mismatches} of {res.elements} elements differ (atol={atol}, rtol={rtol}); first at "
                       f"output {out_idx}{idx}: got {res.first_mismatch.got}, expected {res.first_mismatch.expected}"
                       + (" — NaN means the kernel never wrote this element (fresh memory is NaN)" if nan else ""))
    return res


def _close(g: np.ndarray, e: np.ndarray, atol: float, rtol: float, res: SeedResult) -> np.ndarray:
    """``np.isclose(g, e, atol, rtol, equal_nan=True)``, and the largest absolute and relative errors over the
    elements where both are finite into ``res``. Where every element is finite (a kernel that ran) it is
    ``|g - e| <= atol + rtol * |e|`` in place, in about half the passes of ``isclose`` plus the masked maxima
    (the parent compares every seed's outputs: 0.05 s → 0.02 s for 2 M elements); else ``isclose`` itself."""
    diff = np.subtract(g, e)
    np.abs(diff, out=diff)
    top = diff.max() if diff.size else 0.0
    if np.isfinite(top):  # no NaN, no inf in either array
        scale = np.abs(e)
        tol = np.multiply(scale, rtol)
        tol += atol
        ok = np.less_equal(diff, tol)
        np.maximum(scale, 1e-12, out=scale)
        np.divide(diff, scale, out=diff)
        res.max_abs_error = float(top)
        res.max_rel_error = float(diff.max()) if diff.size else 0.0
        return ok
    ok = np.isclose(g, e, atol=atol, rtol=rtol, equal_nan=True)
    finite = np.isfinite(diff)
    res.max_abs_error = float(diff[finite].max()) if finite.any() else 0.0
    rel = diff / np.maximum(np.abs(e), 1e-12)
    res.max_rel_error = float(rel[finite].max()) if finite.any() else 0.0
    if not finite.all() and not np.array_equal(np.isnan(g), np.isnan(e)):
        res.max_abs_error = float("inf")
    return ok


def run_reference(task: Task, inputs: list[Any], ref: Callable[..., Any] | None = None) -> list[np.ndarray]:
    """The reference's outputs on ``inputs`` (``ref``: the callable ``task.make_reference`` made; else made here)."""
    ref = ref if ref is not None else task.make_reference()
    if task.reference is None:
        import torch

        targs = [x if isinstance(x, torch.Tensor) else _np_to_torch(np.asarray(x)) for x in inputs]
        with torch.no_grad():
            out = ref(*targs)
    else:
        out = ref(*[np.array(_to_np(x), copy=True) for x in inputs])
    return [_to_np(o) for o in _as_list(out)]


def _np_to_torch(a: np.ndarray) -> Any:
    import torch

    if a.dtype == dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.array(a, copy=True))


@dataclass
class Case:
    """One seed's kernel arguments and what the judge compares the kernel's outputs with."""

    seed: int
    args: list[Any]
    reference_seconds: float
    expected: Any = None


# judge(seed, kernel outputs, case.expected, mutated input names) -> the seed's figures
Judge = Callable[[int, list[Any], Any, list[str]], SeedResult]


def draw(task: Task, seed: int, drawn: Callable[[list[np.ndarray], list[np.ndarray]], None] | None = None
         ) -> tuple[list[Any], list[np.ndarray], float]:
    """Seed every RNG, draw the task's inputs, run the reference: (inputs, expected outputs, seconds).

    ``drawn(inputs, parameters)`` (as arrays) is called once the inputs are drawn and the model built, before
    the reference runs (the judge traces the kernel on their shapes meanwhile)."""
    task.seed(seed)
    inputs = _as_list(task.get_inputs())
    task.seed(seed)
    t0 = time.perf_counter()
    ref = task.make_reference()
    if drawn is not None:
        drawn([_to_np(x) for x in inputs], [_to_np(p) for p in task.model_parameters()])
    expected = run_reference(task, copy.deepcopy(inputs) if task.reference is None else inputs, ref)
    return inputs, expected, time.perf_counter() - t0


def verify_loaded(kernel: Kernel, task: Task, kernel_path: str, seeds: int = DEFAULT_SEEDS,
                  target: str | None = None, time_limit: float | None = None) -> VerifyResult:
    def cases() -> Iterator[Case]:
        for seed in range(seeds):
            inputs, expected, t_ref = draw(task, seed)
            args = [_to_np(x) for x in inputs] + _extra_args(kernel, task, len(inputs))
            yield Case(seed, args, t_ref, expected)

    def judge(seed: int, got: list[Any], expected: Any, mutated: list[str]) -> SeedResult:
        return _compare_all(task, got, expected, seed)

    return run_cases(kernel, task, kernel_path, cases(), judge, target, time_limit)


def run_cases(kernel: Kernel, task: Task, kernel_path: str, cases: Iterable[Case], judge: Judge,
              target: str | None = None, time_limit: float | None = None, estimate: bool = True,
              calibration: dict[str, dict[str, float]] | None = None) -> VerifyResult:
    """Launch the kernel on each case and judge its outputs; stops at the first NKI error.

    ``task`` only supplies settings here (launcher, tolerance, input mutation policy). ``estimate``: the
    first case's launch is traced and the cost model's estimate kept (``VerifyResult.estimate``)."""
    from nki_agent.toolchain.judging.simulate import estimate_json
    from nki_agent.toolchain.sim.kernel import _DEFAULT_TARGET, DEFAULTS, LaunchDefaults

    records: list[LaunchRecord] = []
    target = target or task.target
    result = VerifyResult(kernel=kernel_path, task=task.path, target=target or _DEFAULT_TARGET[kernel.generation],
                          generation=kernel.generation)
    token = DEFAULTS.set(LaunchDefaults(target=target, time_limit=time_limit, observer=records.append))
    try:
        for n_case, case in enumerate(cases):
            seed = case.seed
            traced = estimate and n_case == 0
            if traced:
                DEFAULTS.set(LaunchDefaults(target=target, time_limit=time_limit, observer=records.append, trace=True))
            t0 = time.perf_counter()
            launcher = task.launcher(kernel)
            try:
                got = _as_list(launcher(*case.args))
            except NkiError as e:
                result.problems.append(Problem.from_error(e))
                result.seeds.append(SeedResult(seed=seed, correct=False, message=str(e.message)))
                return result
            finally:
                if traced:
                    DEFAULTS.set(LaunchDefaults(target=target, time_limit=time_limit, observer=records.append))
            t_kern = time.perf_counter() - t0
            result.compiled = True
            if records and traced and records[-1].instruction_trace is not None:
                result.estimate = estimate_json(records[-1], calibration=calibration)
                records[-1].instruction_trace = None  # the trace can be large: keep only the estimate
            if records:
                rec = records[-1]
                result.target = rec.target
                result.peak_sbuf_bytes = max(result.peak_sbuf_bytes, rec.peak_sbuf_bytes)
                result.peak_psum_bytes = max(result.peak_psum_bytes, rec.peak_psum_bytes)
                if seed == 0:
                    result.trace = [asdict(t) for t in rec.trace[:2000]]
            if records and seed == 0:
                result.problems.extend(Problem.from_error(w) for w in records[-1].warnings)
            mutated = list(records[-1].mutated_inputs) if records else []
            seed_res = judge(seed, got, case.expected, mutated)
            seed_res.kernel_seconds, seed_res.reference_seconds = t_kern, case.reference_seconds
            if mutated and not task.allow_input_mutation:
                mark_mutated(seed_res, mutated)
                result.problems.append(Problem("sim_input_mutated",
                                               f"the kernel wrote into input argument(s) {mutated}; outputs must be "
                                               "new tensors (set ALLOW_INPUT_MUTATION = True in the task if intended)",
                                               location=SourceLocation(kernel_path, _def_line(kernel))))
            result.seeds.append(seed_res)
            result.atol, result.rtol = tolerance_for(task, [_to_np(g) for g in got if g is not None])
    finally:
        DEFAULTS.reset(token)
    result.correct = result.compiled and all(s.correct for s in result.seeds) and bool(result.seeds)
    return result


def mark_mutated(seed_res: SeedResult, mutated: list[str]) -> None:
    """A kernel that wrote into its inputs fails the seed (unless the task allows it: callers check)."""
    seed_res.correct = False
    seed_res.message = (seed_res.message + "; " if seed_res.message else "") + f"kernel modified its input(s) {mutated}"


def _def_line(kernel: Kernel) -> int:
    traced = getattr(kernel, "def_line", None)  # a traced program (sim/replay.py) knows where its kernel is
    if isinstance(traced, int):
        return traced
    from nki_agent.toolchain.sim.kernel import kernel_location

    loc = kernel_location(kernel)
    return loc.line if loc else 1


def _extra_args(kernel: Kernel, task: Task, n_inputs: int) -> list[Any]:
    """Model-form tasks with parameters pass them after the inputs when the kernel takes them."""
    return select_params(kernel, [_to_np(p) for p in task.model_parameters()], n_inputs)


def select_params(kernel: Kernel, params: list[Any], n_inputs: int) -> list[Any]:
    """The leading model parameters the kernel's signature has room for after its inputs."""
    import inspect

    try:
        n_params = len(inspect.signature(kernel.func).parameters)
    except (TypeError, ValueError):
        return []
    if n_params > n_inputs and params:
        return params[: n_params - n_inputs]
    return []


def _compare_all(task: Task, got: list[Any], expected: list[np.ndarray], seed: int) -> SeedResult:
    if len(got) != len(expected):
        return SeedResult(seed=seed, correct=False,
                          message=f"kernel returned {len(got)} output(s), reference returned {len(expected)}")
    outs = [_to_np(g) if g is not None else np.array([]) for g in got]
    atol, rtol = tolerance_for(task, outs)
    total = SeedResult(seed=seed, correct=True)
    for i, (g, e) in enumerate(zip(outs, expected)):
        r = compare(g, e, atol, rtol, i)
        total.correct &= r.correct
        total.max_abs_error = max(total.max_abs_error, r.max_abs_error)
        total.max_rel_error = max(total.max_rel_error, r.max_rel_error)
        total.mismatches += r.mismatches
        total.elements += r.elements
        if total.first_mismatch is None and (r.first_mismatch or r.message):
            total.first_mismatch = r.first_mismatch
            total.message = r.message
    return total


def verify_files(kernel_path: str, task_path: str, seeds: int = DEFAULT_SEEDS, target: str | None = None,
                 kernel_name: str | None = None, time_limit: float | None = None,
                 search_path: Sequence[str] = ()) -> VerifyResult:
    """Load task and kernel (in this process) and verify; problems are returned, never raised.

    ``search_path``: folders both files may import from after their own (``tasks.load_module``)."""
    result = VerifyResult(kernel=kernel_path, task=task_path, target=target or "")
    try:
        task = load_task(task_path, search_path)
        module = load_module(kernel_path, "nki_agent_kernel", search_path)
        kernel = find_kernel(module, kernel_name or task.kernel_name)
    except NkiError as e:
        result.problems.append(Problem.from_error(e))
        return result
    try:
        return verify_loaded(kernel, task, kernel_path, seeds, target, time_limit)
    except NkiError as e:
        result.problems.append(Problem.from_error(e))
        return result
    except Exception as e:  # errors in the task's own code (inputs, reference) are task errors
        result.problems.append(task_problem(e, task_path))
        return result


def task_problem(e: BaseException, task_path: str) -> Problem:
    """``sim_task_error`` for an exception the task's own code raised, at its line."""
    from nki_agent.toolchain.location import traceback_location

    return Problem("sim_task_error", f"{type(e).__name__} in task code: {e}",
                   location=traceback_location(e.__traceback__) or SourceLocation(task_path, 1))
