"""Messages name the user's variable, not `tensor`, when the kernel gives no name= (issue: honest text)."""

from __future__ import annotations

from pathlib import Path

import pytest
from nki_agent.toolchain import api

TASK = ("import numpy as np\n"
        "def get_inputs():\n    return [np.ones((128, 64), np.float32)]\n"
        "def reference(x):\n    return x\n")
HEAD = ("import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n\n@nki.jit\ndef k(x):\n"
        "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n")


@pytest.mark.parametrize("line,shown", [
    ("    acc = nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.sbuf)\n", "'acc'"),
    ("    acc: object = nl.zeros((256, 64), dtype=nl.float32, buffer=nl.sbuf)\n", "'acc'"),
    ("    t = nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.sbuf, name='tile_a')\n", "'tile_a'"),
    ("    a, b = nl.ndarray((256, 64), dtype=nl.float32, buffer=nl.sbuf), 1\n", "'tensor'"),
])
def test_partition_error_names_the_variable(tmp_path: Path, line: str, shown: str) -> None:
    (tmp_path / "task.py").write_text(TASK)
    (tmp_path / "k.py").write_text(HEAD + line + "    return out\n")
    res = api.simulate(str(tmp_path / "k.py"), str(tmp_path / "task.py"), isolate=False)
    msgs = [p.message for p in res.problems if p.code == "err_num_partition_exceed_arch_limit"]
    assert msgs and f"tensor {shown}" in msgs[0], [p.message for p in res.problems]


@pytest.mark.parametrize("line,shown", [
    ("    t = nl.load(x)\n", "'t'"),
    ("    nl.exp(nl.load(x))\n", "'x_tile'"),  # no name in the file: named after what it loads
])
def test_a_loaded_tile_is_named_as_the_file_names_it(tmp_path: Path, line: str, shown: str) -> None:
    (tmp_path / "task.py").write_text(TASK.replace("(128, 64)", "(256, 64)"))
    (tmp_path / "k.py").write_text(HEAD + line + "    return out\n")
    res = api.simulate(str(tmp_path / "k.py"), str(tmp_path / "task.py"), isolate=False)
    msgs = [p.message for p in res.problems if p.code == "err_num_partition_exceed_arch_limit"]
    assert msgs and f"tensor {shown}" in msgs[0], [p.message for p in res.problems]
