"""Signature + limits blurbs of every ``nl.*`` / ``nisa.*`` name, for hovers and the agent's ``lookup`` tool.

Everything comes from the NKI API table (``toolchain/facts/nki_api.py``): the signature of each generation
(the simulator's parameters), whether a call returns a tile, the engine the cost model runs it on, the
blurb and the doc link. Limits are the per-target numbers of ``toolchain.targets``, filled in at render time.
"""

from __future__ import annotations

from dataclasses import dataclass

from nki_agent.toolchain.facts import nki_api
from nki_agent.toolchain.facts.nki_api import ApiRow
from nki_agent.toolchain.facts.targets import get_target


@dataclass(frozen=True)
class ApiDoc:
    ns: str  # nl | nisa
    signature: str  # one line per generation that has the name
    blurb: str


def _doc(r: ApiRow) -> ApiDoc:
    return ApiDoc(r.ns, "\n".join(dict.fromkeys(r.signature(g) for g in r.generations)), r.blurb)


API: dict[tuple[str, str], ApiDoc] = {key: _doc(r) for key, r in nki_api.ROWS.items()}


def lookup(ns: str, name: str) -> ApiDoc | None:
    return API.get((ns, name)) or API.get(("nisa" if ns == "nl" else "nl", name))


def fill(blurb: str, target: str) -> str:
    t = get_target(target)
    return blurb.format(pmax=t.pmax, sbuf=f"{t.sbuf_bytes_per_partition:,}", psum=f"{t.psum_bytes_per_partition:,}",
                        stat=t.gemm_stationary_fmax, mov=t.gemm_moving_fmax, target=t.name)


def markdown(ns: str, name: str, generation: str, target: str, attribute: str = "") -> str | None:
    """Hover text of ``ns.name`` (``attribute``: e.g. ``pmax`` of ``nl.tile_size.pmax``) for a file of
    ``generation`` (classic / new; "" shows every generation's signature) and the limits of ``target``."""
    r = nki_api.lookup(ns, name)
    if r is None:
        if ns not in ("nl", "nisa") or not name.isidentifier():
            return None
        module = "language" if ns == "nl" else "isa"
        return (f"```python\n{ns}.{name}\n```\nNot in the NKI API table: the embedded simulator does not model "
                f"`{ns}.{name}` (a newer API, or a typo), so a simulation stops at it with sim_unsupported_api.\n\n"
                f"[nki.{module}.{name} documentation]({nki_api.DOCS}/nki.{module}.{name}.html)")
    gens = [g for g in r.generations if not generation or g == generation or generation == "mixed"] or \
        list(r.generations)
    sigs = "\n".join(dict.fromkeys(r.signature(g) for g in gens))
    head = f"```python\n{sigs}\n```"
    if r.name == "tile_size" and attribute:
        value = tile_size_value(attribute, target)
        if value is not None:
            head = f"```python\n{r.qualname}.{attribute} = {value}\n```"
    facts = []
    if r.kind == "function":
        results = {r.result_in(g) for g in gens}
        facts.append("returns a tile" + (f" in {r.buffer.upper()}" if r.buffer else "") if any(
            x in nki_api.TILE_RESULTS for x in results) else ("returns nothing (writes its destination)"
                                                              if results == {"none"} else ""))
        engine = r.engine()
        if engine:
            facts.append(f"runs on {engine} (cost model)")
        if not r.modelled:
            facts.append("not modelled by the embedded simulator")
    if _only(r, nki_api.NEW):
        facts.append("new API only")
    elif _only(r, nki_api.CLASSIC):
        facts.append("classic API only")
    line = " · ".join(f for f in facts if f)
    return (f"{head}\n{fill(r.blurb, target)}\n\n" + (f"{line}\n\n" if line else "") +
            f"[{r.qualname} documentation]({r.url}) · _limits shown for {get_target(target).name}_")


def _only(r: ApiRow, generation: str) -> bool:
    return r.generations == (generation,)


def tile_size_value(attribute: str, target: str) -> int | None:
    """``nl.tile_size.<attribute>`` on ``target`` (the simulator's ``TileSize`` values)."""
    t = get_target(target)
    values = {"pmax": t.pmax, "psum_fmax": 512, "psum_bank_fmax": 512, "psum_bank_fmax_bytes": t.psum_bank_bytes,
              "psum_num_banks": t.psum_banks, "gemm_stationary_fmax": t.gemm_stationary_fmax,
              "gemm_moving_fmax": 512, "bn_stats_fmax": t.bn_stats_fmax, "psum_min_align": 4, "sbuf_min_align": 1,
              "total_available_sbuf_size": t.sbuf_bytes_per_partition, "sbuf_fmax_bytes": t.sbuf_bytes_per_partition,
              "sbuf_fmax": t.sbuf_bytes_per_partition // 4, "sbuf_size_bytes": t.sbuf_bytes_per_partition * 128}
    return values.get(attribute)
