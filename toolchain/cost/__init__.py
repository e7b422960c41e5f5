"""The analytical cost model: a launch's instruction trace (``sim/trace.py``) -> ``CostEstimate``.

Modules, one concern each:
  hardware.py     per-target constants (documented) and the FREE, calibratable ``Constants``
  engines.py      which engine runs an instruction and which cost formula applies
  instr_cost.py   engine cycles of one instruction (nki-language.md §5 formulas)
  dma.py          DMA transfer time, the per-core bandwidth ceiling, SBUF spills
  deps.py         data dependencies (byte ranges per storage), loop/instance barriers, SBUF tile liveness
  schedule.py     the list scheduler: start/end per instruction, busy time, critical path
  attribution.py  time per line and loop, bounds, FLOPs, HBM traffic, the timeline
  model.py        ``estimate`` (the façade)
  calibration.py  calibration files and the fit of the free constants to measured latencies

Invariants: pure computation (only ``calibration`` touches files); importing the package does not import
pydantic (workers use ``estimate_data``: plain data with ``CostEstimate``'s fields, validated in the
parent; ``estimate`` returns the model); no import of the simulator beyond the plain-data trace format.
"""

from __future__ import annotations

from .hardware import FREE, Constants, Hardware, constants_for, hardware_for
from .model import estimate, estimate_data, estimate_prepared, latency_us
from .schedule import prepare

__all__ = ["FREE", "Constants", "Hardware", "constants_for", "estimate", "estimate_data", "estimate_prepared", "hardware_for",
           "latency_us", "prepare"]
