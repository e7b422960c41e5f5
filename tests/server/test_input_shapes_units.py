"""The pre-filled line of "Add input shapes" (no server): parameters the kernel takes as values are left for
the user to fill in, and shapes the body asserts are used (the nki-samples MX kernels: a dtype parameter,
``assert moving.shape == (MAX_TILE_K, MAX_TILE_N * 4)``, uint8 scales of ``nc_matmul_mx``)."""

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
    ("def k(stationary_mx_data, stationary_mx_scale, moving_mx_data, moving_mx_scale, mx_dtype):\n"
     "    r = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.psum)\n"
     "    nisa.nc_matmul_mx(dst=r, stationary=stationary_mx_data, moving=moving_mx_data,\n"
     "                      stationary_scale=stationary_mx_scale, moving_scale=moving_mx_scale)\n    return r\n",
     # MX scales are uint8 (E8M0); the packed data keeps float32, 4 bytes like four 8-bit values of an _x4 dtype
     "# nki: stationary_mx_data=(128, 128) float32, stationary_mx_scale=(128, 128) uint8, "
     "moving_mx_data=(128, 128) float32, moving_mx_scale=(128, 128) uint8, mx_dtype=?"),
    ("def k(a, scale):\n    return a\n",  # not an MX kernel: a tensor named scale is not guessed
     "# nki: a=(128, 128) float32, scale=(128, 128) float32"),
], ids=["mx-matmul", "annotated-value-and-default", "asserted-size", "allocated-size", "mx-scales-uint8",
        "scale-outside-mx"])
def test_the_prefilled_shape_line(kernel: str, line: str) -> None:
    text = HEAD + kernel
    [k] = taskless.kernel_defs(taskless.parse(text), text)
    assert taskless.shape_line(k, known_inputs(k, static_facts(text).tensors, {})) == line
