"""``nl.par_dim(n)`` with a known ``n`` above ``nl.tile_size.pmax`` (``err_num_partition_exceed_arch_limit``):
the partition axis of a shape has at most 128 partitions on every NeuronCore generation, wherever the
shape is written (an allocation's argument or a shape tuple bound to a name). Reported at the ``par_dim``
call; the allocation's own partition check (``partition_limit``) leaves ``par_dim`` axes to this rule."""

from __future__ import annotations

from ..finding import Finding
from ..interp import Event
from ..values import known_int

CODE = "err_num_partition_exceed_arch_limit"
KINDS = {"call"}
PMAX = 128  # partitions on every NeuronCore generation (toolchain.targets: pmax)


def check(event: Event, ctx: object) -> list[Finding]:
    f = event.facts
    if (f["ns"], f["name"]) != ("nl", "par_dim") or getattr(ctx, "generation", "") == "new":
        return []  # the new API has no par_dim at all (removed_api says so)
    args = f["args"] or [f["kwargs"].get("n")]
    n = known_int(args[0]) if args and args[0] is not None else None
    if n is None or n <= PMAX:
        return []
    return [Finding(CODE, f"nl.par_dim({n}): a partition dimension has at most {PMAX} partitions "
                    "(nl.tile_size.pmax); split it into tiles of 128 partitions", event.node)]
