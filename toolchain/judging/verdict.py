"""The verdict from what the workers sent: the trusted plan (the reference's seeds, kept in the parent) against the
executor's (or the device kernel role's) ``run`` frames, compared with ``verify.py``'s functions and tolerances;
input mutation detected bit for bit against the parent's own copy of the arguments. Nothing a worker claims
about correctness is believed: its reply only supplies what is shown (problems, trace, the estimate)."""

from __future__ import annotations

from typing import Any

import numpy as np

from nki_agent.toolchain.facts.errors import Problem, SourceLocation


def _same_bytes(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Bit-for-bit equality (NaN payloads included): the argument the parent sent vs what came back."""
    if a is None or b is None:
        return a is b
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool(np.array_equal(np.ascontiguousarray(a).reshape(-1).view(np.uint8),
                               np.ascontiguousarray(b).reshape(-1).view(np.uint8)))


class Compared:
    """Each seed's comparison, made as its ``run`` frame arrives (the executor runs the next seed meanwhile):
    only the last seed's is left when the reply comes. A frame that does not match its header is left for
    ``judge_runs``, which rejects it."""

    def __init__(self, settings: dict[str, Any] | None, plan: list[dict[str, Any]]) -> None:
        from nki_agent.toolchain.judging.roles import _task_settings

        self.task = _task_settings(settings) if isinstance(settings, dict) else None
        self.plan = {s["seed"]: s for s in plan}
        self.done: dict[int, Any] = {}

    def add(self, seed: int, run: dict[str, Any], arrays: list[np.ndarray | None]) -> None:
        from nki_agent.toolchain.judging.verify import _compare_all

        s = self.plan.get(seed)
        if self.task is None or s is None or seed in self.done:
            return
        try:
            n_out, n_args = int(run["outputs"]), int(run["arguments"])
        except (KeyError, TypeError, ValueError):
            return
        if n_out < 0 or n_args < 0 or n_out + n_args != len(arrays):
            return
        self.done[seed] = _compare_all(self.task, list(arrays[:n_out]), s["expected"], seed)

    def get(self, seed: int, got: list[Any], expected: list[np.ndarray], task: Any) -> Any:
        from nki_agent.toolchain.judging.verify import _compare_all

        done = self.done.pop(seed, None)
        return done if done is not None else _compare_all(task, got, expected, seed)


def judge_runs(body: dict[str, Any], frames: dict[int, tuple[dict[str, Any], list[np.ndarray | None]]],
           plan: list[dict[str, Any]], settings: dict[str, Any], kernel: str,
           task: str, compared: Compared | None = None) -> tuple[dict[str, Any], dict[int, int]]:
    """Rebuild the verify result from the trusted plan and the kernel's ``run`` frames (``compared``: the
    seeds already compared as they arrived); also the line of each seed's first mismatch, where the kernel's
    store log names it (display only)."""
    from nki_agent.toolchain.judging.roles import _task_settings
    from nki_agent.toolchain.sim.stores import line_of
    from nki_agent.toolchain.judging.verify import SeedResult, VerifyResult, _compare_all, mark_mutated, tolerance_for

    res = body["result"]
    problems = [Problem.from_dict(p) for p in res.get("problems", [])][:200]
    out = VerifyResult(kernel=kernel, task=task, target=str(res.get("target", "")),
                       generation=str(res.get("generation", "")), compiled=bool(res.get("compiled")),
                       problems=problems, peak_sbuf_bytes=int(res.get("peak_sbuf_bytes", 0)),
                       peak_psum_bytes=int(res.get("peak_psum_bytes", 0)), trace=list(res.get("trace", []))[:2000],
                       estimate=res["estimate"] if isinstance(res.get("estimate"), dict) else None)
    task_settings = _task_settings(settings)
    lines: dict[int, int] = {}
    trusted = {s["seed"]: s for s in plan}
    claimed = {int(sd["seed"]): sd for sd in list(res.get("seeds", []))[: len(trusted)]}
    for seed, s in trusted.items():
        frame, sd = frames.get(seed), claimed.get(seed)
        if frame is None or sd is None:  # the launch failed (its problem is reported) or the reply lies
            if sd is not None:
                out.seeds.append(SeedResult(seed=seed, correct=False, message=str(sd.get("message", ""))[:2000]))
            continue
        run, arrays = frame
        n_out, n_args = int(run["outputs"]), int(run["arguments"])
        if n_out < 0 or n_args < 0 or n_out + n_args != len(arrays):
            raise ValueError(f"seed {seed}: the run frame does not match its header")
        got, after = arrays[:n_out], arrays[n_out:]
        r = (compared.get(seed, list(got), s["expected"], task_settings) if compared is not None
             else _compare_all(task_settings, list(got), s["expected"], seed))
        fm = r.first_mismatch
        if fm is not None and 0 <= fm.output < len(got) and getattr(got[fm.output], "shape", None) == \
                s["expected"][fm.output].shape:
            line = line_of(run.get("stores"), fm.output, fm.index)
            if line is not None:
                lines[seed] = line
        r.kernel_seconds, r.reference_seconds = float(sd.get("kernel_seconds", 0.0)), s["reference_seconds"]
        mutated = [f"argument {i}" for i, (sent, a) in enumerate(zip(s["send"][: s["inputs"]], after))
                   if not _same_bytes(sent, a)]
        if len(after) < s["inputs"]:
            mutated.append("(the kernel did not return its arguments)")
        if mutated and not task_settings.allow_input_mutation:
            named = [str(x) for x in run.get("mutated", [])] or mutated
            mark_mutated(r, named)
            if not any(p.code == "sim_input_mutated" for p in out.problems):
                out.problems.append(Problem("sim_input_mutated", f"the kernel wrote into input argument(s) {named}; "
                                            "outputs must be new tensors (set ALLOW_INPUT_MUTATION = True in the "
                                            "task if intended)", location=SourceLocation(kernel, 1)))
        out.seeds.append(r)
        out.atol, out.rtol = tolerance_for(task_settings, [g for g in got if g is not None])
    violated = any(p.code == "sim_sandbox_violation" and p.severity == "error" for p in out.problems)
    out.correct = (out.compiled and len(out.seeds) == len(trusted) and all(x.correct for x in out.seeds)
                   and not violated)
    return out.as_dict(), lines
