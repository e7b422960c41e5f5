"""Ground-truth kernels of the cost model (examples/ground_truth/published.json): the manifest is
well formed and every kernel verifies on its small task with the embedded simulator."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from nki_agent.toolchain.api import verify

GT = Path(__file__).resolve().parents[2] / "examples" / "ground_truth"
ENTRIES = json.loads((GT / "published.json").read_text())
FIELDS = {"id", "family", "kernel", "task", "small_task", "kernel_name", "target", "published_us", "stat", "source"}
STATS = {"p99", "p50", "profile", "p1_ceiling"}
# one verification per (kernel, small task): several published shapes share a kernel
PAIRS = sorted({(e["kernel"], e["small_task"], e["kernel_name"]) for e in ENTRIES})


def test_manifest_is_well_formed() -> None:
    assert ENTRIES, "published.json is empty"
    ids = [e["id"] for e in ENTRIES]
    assert len(ids) == len(set(ids)), "duplicate ids"
    for e in ENTRIES:
        assert FIELDS <= set(e), f"{e.get('id')}: missing {sorted(FIELDS - set(e))}"
        assert e["target"] == "trn1"
        assert e["stat"] in STATS, f"{e['id']}: stat {e['stat']!r}"
        assert isinstance(e["published_us"], (int, float)) and e["published_us"] > 0
        assert e["source"].strip()
        for key in ("kernel", "task", "small_task"):
            assert (GT / e[key]).is_file(), f"{e['id']}: {key} {e[key]} does not exist"
        # the named kernel is a function of the kernel file
        tree = ast.parse((GT / e["kernel"]).read_text())
        names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert e["kernel_name"] in names, f"{e['id']}: no function {e['kernel_name']} in {e['kernel']}"
    assert {e["family"] for e in ENTRIES} >= {"matmul", "mamba", "rmsnorm", "layernorm", "attention"}


@pytest.mark.parametrize("kernel,small_task,kernel_name", PAIRS, ids=[p[0] for p in PAIRS])
def test_kernel_verifies_on_small_task(kernel: str, small_task: str, kernel_name: str) -> None:
    res = verify(str(GT / kernel), str(GT / small_task), seeds=1, kernel_name=kernel_name, isolate=False)
    assert res.correct, f"{kernel} on {small_task}: {res}"
