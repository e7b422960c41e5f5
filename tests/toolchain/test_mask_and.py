"""`and` combining nl.arange conditions (a mask written with Python's `and`) is diagnosed as that — use `&` —
not as "control flow depending on nl.arange"; a real `if` on an index keeps the control-flow message."""

from __future__ import annotations

from pathlib import Path

import pytest
from nki_agent.toolchain import api

TASK = ("import numpy as np\n"
        "def get_inputs():\n    return [np.ones((128, 512), np.float32)]\n"
        "def reference(x):\n    return x\n")
HEAD = ("import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n\n@nki.jit\ndef k(x):\n"
        "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
        "    i_p = nl.arange(128)[:, None]\n    i_f = nl.arange(512)[None, :]\n")


@pytest.mark.parametrize("body,needle", [
    ("    t = nl.load(x[i_p, i_f], mask=(i_p < 100) and (i_f < 300))\n", "`and` on nl.arange conditions"),
    ("    t = nl.load(x[i_p, i_f], mask=(i_p < 100) or (i_f < 300))\n", "use `|`"),
    ("    t = nl.load(x[i_p, i_f], mask=not (i_p < 100))\n", "use `~`"),
    ("    if i_p < 100:\n        pass\n    t = nl.load(x[i_p, i_f])\n", "Control-flow depending on `nl.arange`"),
])
def test_mask_and_is_named(tmp_path: Path, body: str, needle: str) -> None:
    (tmp_path / "task.py").write_text(TASK)
    (tmp_path / "k.py").write_text(HEAD + body + "    nl.store(out[i_p, i_f], value=t)\n    return out\n")
    res = api.simulate(str(tmp_path / "k.py"), str(tmp_path / "task.py"), isolate=False)
    probs = [p for p in res.problems if p.code == "err_control_flow_condition_depending_on_arange"]
    assert probs and needle in probs[0].message, [p.message for p in res.problems]
    assert probs[0].location is not None and probs[0].location.line == len((HEAD + body).splitlines()) - \
        (2 if body.startswith("    if") else 0)


def test_explain_of_the_and_in_mask_finding_speaks_of_and_in_a_mask(tmp_path: Path) -> None:
    """Explain (hover, command, ``nki-agent explain``) of the code this finding carries: its title and text
    speak of `and` between mask conditions and of `&`, not only of an if-statement."""
    from nki_agent.server.explain import explain

    (tmp_path / "task.py").write_text(TASK)
    (tmp_path / "k.py").write_text(HEAD + "    t = nl.load(x[i_p, i_f], mask=(i_p < 100) and (i_f < 300))\n"
                                   "    nl.store(out[i_p, i_f], value=t)\n    return out\n")
    res = api.simulate(str(tmp_path / "k.py"), str(tmp_path / "task.py"), isolate=False)
    (code,) = {p.code for p in res.problems}
    title, text = explain(code).split("\n", 1)
    assert "and" in title and "`and`" in text and "mask=((i < n) & (j < m))" in text
