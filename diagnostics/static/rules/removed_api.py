"""APIs that do not exist in the kernel's NKI generation (``sim_removed_api``): ``nl.arange``/``nl.mgrid``/
``nl.par_dim`` and ``mask=`` in the new API; ``nki.baremetal``/``simulate_kernel``/``benchmark`` there too."""

from __future__ import annotations

from ..finding import Finding
from ..interp import Event

CODE = "sim_removed_api"
KINDS = {"call"}
REMOVED_IN_NEW = {("nl", "arange"): "use slices or nl.ds", ("nl", "mgrid"): "use slices or nl.ds",
                  ("nl", "par_dim"): "the partition dim is always dim 0",
                  ("nki", "baremetal"): "call the nki.jit kernel with NumPy arrays",
                  ("nki", "simulate_kernel"): "use nki.simulate(kernel)(...)",
                  ("nki", "benchmark"): "profile with NEURON_FRAMEWORK_DEBUG=1 and neuron-profile"}


def check(event: Event, ctx: object) -> list[Finding]:
    if getattr(ctx, "generation", "") != "new":
        return []
    f = event.facts
    key = (f["ns"], f["name"])
    if key in REMOVED_IN_NEW:
        return [Finding(CODE, f"{f['ns']}.{f['name']} was removed in the new NKI API; {REMOVED_IN_NEW[key]}",
                        event.node)]
    if f["ns"] in ("nl", "nisa") and "mask" in f["kwargs"]:
        return [Finding(CODE, f"mask= was removed in the new NKI API ({f['ns']}.{f['name']}); clamp slices with "
                        "min() instead", event.node)]
    return []
