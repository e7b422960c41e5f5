"""The NKI API table (toolchain/facts/nki_api.py) against the simulator's own namespaces, both generations: every
simulator name has a row, every row hover text, the tile results agree with what the simulator's functions
return, the generated signatures are current, and the static interpreter's tile list is the table's."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from nki_agent.diagnostics import api_reference
from nki_agent.diagnostics.static import interp
from nki_agent.diagnostics.static.interp import Context, Interpreter
from nki_agent.diagnostics.static.values import TileV
from nki_agent.toolchain.facts import nki_api
from nki_agent.toolchain.facts.nki_api import BOTH, ROWS

SURFACE = nki_api.simulator_surface()


@pytest.mark.parametrize("generation", BOTH)
def test_every_simulator_api_has_a_row(generation: str) -> None:
    names = {(ns, name) for gen, ns, name in SURFACE if gen == generation}
    missing = sorted(f"{ns}.{name}" for ns, name in names if (ns, name) not in ROWS)
    assert not missing, f"the simulator's {generation} namespaces have names the API table lacks: {missing}"
    wrong = sorted(f"{ns}.{name}" for ns, name in names if generation not in ROWS[(ns, name)].generations)
    assert not wrong, f"rows that do not list {generation} although its simulator has them: {wrong}"


def test_every_row_is_in_the_simulator_of_its_generations() -> None:
    extra = sorted(f"{g}:{r.qualname}" for r in ROWS.values() for g in r.generations if (g, r.ns, r.name) not in SURFACE)
    assert not extra, f"rows naming a generation whose simulator has no such name: {extra}"


@pytest.mark.parametrize("key", sorted(ROWS), ids=[f"{ns}.{n}" for ns, n in sorted(ROWS)])
def test_every_row_has_hover_text(key: tuple[str, str]) -> None:
    row = ROWS[key]
    assert row.blurb.strip() and "{name}" not in row.blurb
    for generation in row.generations:
        md = api_reference.markdown(row.ns, row.name, generation, "trn1")
        assert md and row.qualname in md and row.url in md
        assert "{" not in api_reference.fill(row.blurb, "trn3")  # every placeholder filled


def test_tile_results_agree_with_the_simulators_functions() -> None:
    """A modelled function returns a tile in a generation exactly when the simulator's returns a Tensor."""
    disagree = []
    for (gen, ns, name), obj in SURFACE.items():
        row = ROWS[(ns, name)]
        if row.kind != "function" or not row.modelled or isinstance(obj, type) or not callable(obj):
            continue
        annotation = inspect.signature(obj).return_annotation
        if annotation in ("Tensor", "None") and (annotation == "Tensor") != row.returns_tile(gen):
            disagree.append(f"{gen}:{row.qualname} -> {annotation}, table {row.result_in(gen)}")
    assert not disagree, disagree


def test_unmodelled_rows_are_the_simulators_unsupported_apis() -> None:
    for (gen, ns, name), obj in SURFACE.items():
        row = ROWS[(ns, name)]
        unsupported = getattr(inspect.unwrap(obj), "__qualname__", "").startswith("unsupported.")  # type: ignore[arg-type]
        assert unsupported == (not row.modelled), f"{gen}:{row.qualname}"


def test_signatures_file_is_current() -> None:
    path = Path(nki_api.__file__).with_name("nki_api_signatures.py")
    assert path.read_text() == nki_api.render_signatures(), \
        "toolchain/facts/nki_api_signatures.py is stale: run python -m nki_agent.toolchain.facts.nki_api"


def test_every_instruction_has_the_cost_models_engine() -> None:
    for row in ROWS.values():
        if row.kind == "function" and row.returns_tile(row.generations[0]) and row.modelled:
            assert row.engine(), row.qualname


def test_interpreter_tile_lists_are_the_tables() -> None:
    assert interp.NL_TILE_RESULTS == nki_api.tile_results("nl", "classic") | nki_api.tile_results("nl", "new")
    assert interp.CLASSIC_ISA_TILE_RESULTS == nki_api.tile_results("nisa", "classic")
    assert interp.NEW_ISA_TILE_RESULTS == nki_api.tile_results("nisa", "new")
    assert interp.ALLOCATORS == nki_api.allocators()


@pytest.mark.parametrize("generation", BOTH)
def test_interpreter_returns_a_tile_for_every_tile_api(generation: str) -> None:
    """Each tile-returning call of the table, written in a kernel, binds a tile in the static interpreter."""
    root = "neuronxcc.nki" if generation == "classic" else "nki"
    calls = [r for r in ROWS.values() if r.kind == "function" and generation in r.generations]
    body = "\n".join(f"    r{k} = {r.ns}.{r.name}(t, t)" for k, r in enumerate(calls))
    src = f"def kernel(t):\n{body}\n"
    fn = ast.parse(src).body[0]
    assert isinstance(fn, ast.FunctionDef)
    ctx = Context(aliases={"nl": f"{root}.language", "nisa": f"{root}.isa"}, constants={}, generation=generation,
                  param_shapes={"t": (128, 512)})
    it = Interpreter(ctx, lambda e: None)
    it.run(fn)
    for k, r in enumerate(calls):
        got = isinstance(it.env.get(f"r{k}"), TileV)
        assert got == r.returns_tile(generation), f"{generation}:{r.qualname}: interpreter tile={got}"
