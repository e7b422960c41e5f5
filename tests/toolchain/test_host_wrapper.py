"""A task whose ``KERNEL`` is a host-side wrapper — plain Python that launches an ``@nki.jit`` kernel with a
grid, as the SPMD tutorial's ``nki_tensor_add`` — verifies: the wrapper is host code, its launch is the launch
(a grid launched from inside a kernel stays ``err_nested_kernel_with_spmd_grid``: tests/fixtures/broken)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nki_agent.toolchain import api
from nki_agent.toolchain.sim.kernel import HostWrapper, Kernel
from nki_agent.toolchain.tasks import find_kernel, load_module

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "host_wrapper"


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "jailed"])
def test_a_host_wrapper_launching_a_grid_verifies(isolate: bool) -> None:
    res = api.verify(str(FIXTURE / "kernel.py"), str(FIXTURE / "task.py"), seeds=2, isolate=isolate)
    assert res.correct and not res.problems, [(p.code, p.message) for p in res.problems]


@pytest.mark.parametrize("source,name,kind", [
    (None, "add", HostWrapper),  # names the kernel it launches
    (None, "add_kernel_", Kernel),  # the @nki.jit kernel itself
    ("@nki.jit\ndef add_kernel_", "add_kernel_", Kernel),  # undecorated: a kernel, not a wrapper
], ids=["wrapper", "decorated", "undecorated"])
def test_which_named_function_is_host_code(tmp_path: Path, source: str | None, name: str, kind: type) -> None:
    text = (FIXTURE / "kernel.py").read_text()
    if source is not None:
        assert source in text
        text = text.replace(source, "def add_kernel_").split("\n\ndef add(")[0]
    (tmp_path / "k.py").write_text(text)
    found = find_kernel(load_module(str(tmp_path / "k.py"), "host_wrapper_case"), name)
    assert type(found) is kind
