"""The pre-filled line of "Add input shapes" (no server): parameters the kernel takes as values are left for
the user to fill in, and shapes the body asserts are used (the nki-samples MX kernels: a dtype parameter,
``assert moving.shape == (MAX_TILE_K, MAX_TILE_N * 4)``)."""

from __future__ import annotations

import pytest

from nki_agent.diagnostics.views.facts import static_facts
from nki_agent.server.handlers.input_shapes import known_inputs
from nki_agent.toolchain import taskless

HEAD = ("import nki\nimport nki.language as nl\nimport nki.isa as nisa\n\n\n@nki.jit\n")


@pytest.mark.parametrize("kernel,line", [
    ("def k(stationary, moving, mx_dtype):\n"
     "    MAX_TILE_K = nl.tile_size.pmax\n    MAX_TILE_N = nl.tile_size.gemm_moving_fmax\n"
     "    assert moving.shape == (MAX_TILE_K, MAX_TILE_N * 4)\n"
     "    t = stationary.ap(dtype=mx_dtype)\n    return t\n",
     "# nki: stationary=(128, 128) float32, moving=(128, 2048) float32, mx_dtype=?"),
    ("def k(a, b, scale: float, use_copy: bool = True):\n    assert a.shape == (256, 64)\n    return a\n",
     "# nki: a=(256, 64) float32, b=(128, 128) float32, scale=?"),
    ("def k(a, n):\n    assert a.shape == (n, 64)\n    return a\n",  # a size parameter: a value to fill in
     "# nki: a=(128, 64) float32, n=?"),  # the unknown size is the placeholder
    ("def k(a, m):\n    t = nl.ndarray((m, 64), dtype=nl.float32, buffer=nl.sbuf)\n    return a\n",
     "# nki: a=(128, 128) float32, m=?"),
], ids=["mx-matmul", "annotated-value-and-default", "asserted-size", "allocated-size"])
def test_the_prefilled_shape_line(kernel: str, line: str) -> None:
    text = HEAD + kernel
    [k] = taskless.kernel_defs(taskless.parse(text), text)
    assert taskless.shape_line(k, known_inputs(k, static_facts(text).tensors, {})) == line
