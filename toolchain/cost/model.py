"""``estimate``: one traced launch -> ``CostEstimate`` (the façade of the cost model).

latency = launch overhead (FREE ``launch_overhead_us``) + makespan of the schedule (+ serial spill
traffic when the launch's live SBUF exceeds capacity). The bound is "overhead" when the overhead is
more than half of the latency, else the class of engine with the most time on the critical path.
Utilisations are of the target's TensorE peak for the kernel's dominant matmul kind and of the
per-core DMA ceiling (272 / 368 / 528 GB/s) over the whole latency.

Pure: no I/O (calibration files are read by ``calibration.load_calibration``, whose result the caller
passes as ``constants``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..sim.trace import Trace
from .attribution import CLASSES, attribute
from .dma import spill
from .hardware import Constants, constants_for, hardware_for
from .schedule import Prepared, prepare, run

if TYPE_CHECKING:
    from nki_agent.toolchain.protocol.cost import Bound, CostEstimate


def estimate(trace: Trace, target: str | None = None, *, constants: Constants | None = None,
             peak_sbuf_bytes: int = 0, timeline: bool = False, sensitivities: bool = False) -> "CostEstimate":
    """Estimate the latency of the launch recorded in ``trace`` on ``target`` (default: ``trace.target``).

    ``constants``: the model's free parameters (default: the documented ones, ``constants_for``);
    ``peak_sbuf_bytes``: the launch's peak live SBUF (spills are modelled when it exceeds capacity);
    ``timeline``: include the engine timeline (bounded to ~4000 bars);
    ``sensitivities``: also compute the latency's relative sensitivity to each free constant (one more
    schedule run per constant), so ``calibration.fit`` can re-predict the estimate without the trace."""
    from nki_agent.toolchain.protocol.cost import CostEstimate

    return CostEstimate.model_validate(estimate_data(trace, target, constants=constants, peak_sbuf_bytes=peak_sbuf_bytes,
                                                     timeline=timeline, sensitivities=sensitivities))


def estimate_data(trace: Trace, target: str | None = None, *, constants: Constants | None = None,
                  peak_sbuf_bytes: int = 0, timeline: bool = False, sensitivities: bool = False) -> dict[str, Any]:
    """``estimate`` as plain JSON-ready data with exactly ``CostEstimate``'s fields (what a worker sends:
    workers never import pydantic; the parent validates it into the model)."""
    hw = hardware_for(target or trace.target or None)
    return estimate_prepared_data(prepare(trace, hw), constants or constants_for(hw.target),
                                  peak_sbuf_bytes=peak_sbuf_bytes, timeline=timeline, sensitivities=sensitivities)


SENSITIVITY_STEP = 1.25  # relative change of a constant for its finite-difference sensitivity


def sensitivities_of(p: Prepared, constants: Constants, peak_sbuf_bytes: int = 0,
                     base_us: float | None = None) -> dict[str, float]:
    """Relative change of the latency per relative change of each free constant ((L'/L - 1) / 0.25 for the
    constant x1.25): exact for the parts of the latency linear in the constant (the overhead, fixed costs
    on the critical path)."""
    base = latency_us(p, constants, peak_sbuf_bytes) if base_us is None else base_us
    out: dict[str, float] = {}
    for name, value in constants.free_values().items():
        moved = latency_us(p, constants.with_values({name: value * SENSITIVITY_STEP}), peak_sbuf_bytes)
        out[name] = (moved / base - 1.0) / (SENSITIVITY_STEP - 1.0) if base > 0 else 0.0
    return out


def latency_us(p: Prepared, constants: Constants, peak_sbuf_bytes: int = 0) -> float:
    """Only the estimated latency of a prepared trace (what calibration evaluates many times)."""
    s = run(p, constants)
    sp = spill(peak_sbuf_bytes, p.hw, constants, p.tile_peak)
    return constants.launch_overhead_us + (s.makespan + (sp.ns if sp else 0.0)) / 1000


def estimate_prepared(p: Prepared, constants: Constants, *, peak_sbuf_bytes: int = 0,
                      timeline: bool = False, sensitivities: bool = False) -> "CostEstimate":
    """``estimate`` of an already prepared trace (``schedule.prepare``)."""
    from nki_agent.toolchain.protocol.cost import CostEstimate

    return CostEstimate.model_validate(estimate_prepared_data(p, constants, peak_sbuf_bytes=peak_sbuf_bytes,
                                                              timeline=timeline, sensitivities=sensitivities))


def estimate_prepared_data(p: Prepared, constants: Constants, *, peak_sbuf_bytes: int = 0,
                           timeline: bool = False, sensitivities: bool = False) -> dict[str, Any]:
    """``estimate_prepared`` as plain data (``estimate_data``)."""
    hw = p.hw
    s = run(p, constants)
    sp = spill(peak_sbuf_bytes, hw, constants, p.tile_peak)
    spill_ns = sp.ns if sp else 0.0
    overhead_ns = constants.launch_overhead_us * 1000
    latency_ns = overhead_ns + s.makespan + spill_ns
    att = attribute(p, s, latency_ns, timeline)
    hbm = att.hbm_bytes + (sp.traffic_bytes if sp else 0)
    by_class = list(att.critical_by_class)
    by_class[CLASSES.index("DMA")] += spill_ns
    bound: "Bound"
    if overhead_ns > latency_ns / 2 or not any(by_class):
        bound = "overhead"
    else:
        bound = CLASSES[max(range(len(CLASSES)), key=by_class.__getitem__)]
    peak = hw.tensor_peak_flops_per_ns(att.pe_kind)
    notes: list[str] = []
    if p.trace.truncated:
        notes.append(f"trace truncated at {len(p.trace.instrs)} instructions: the estimate covers only the "
                     "recorded part")
    if p.unknown:
        listed = ", ".join(f"{api} ({n}x)" for api, n in sorted(p.unknown.items()))
        notes.append(f"not in the cost tables, costed as a two-input VectorE op: {listed}")
    if sp is not None:
        notes.append(sp.note)
    if not p.trace.instrs:
        notes.append("no instructions were traced: the estimate is the launch overhead alone")
    return dict(
        target=hw.target,
        latency_us=latency_ns / 1000,
        overhead_us=overhead_ns / 1000,
        bound=bound,
        engines=att.engines,
        lines=att.lines,
        loops=att.loops,
        flops=att.flops,
        hbm_bytes=hbm,
        flop_utilisation=min(1.0, att.flops / (latency_ns * peak)) if latency_ns > 0 else 0.0,
        bandwidth_utilisation=min(1.0, hbm / (latency_ns * hw.dma_aggregate_bytes_per_ns)) if latency_ns > 0 else 0.0,
        instructions=len(p.trace.instrs),
        truncated=p.trace.truncated,
        calibration=constants.source,
        critical_path_us=s.makespan / 1000,
        timeline=att.timeline,
        notes=notes,
        constants=constants.free_values(),
        sensitivities=(sensitivities_of(p, constants, peak_sbuf_bytes, latency_ns / 1000)
                       if sensitivities else {}),
    )
