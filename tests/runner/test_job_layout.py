"""A job's two bundles on the runner (``runner/layout.py``): the kernel's and the task's folders, and the
refusal of a kernel module that shadows a task import or an installed module.

The HTTP refusals run on ``GateBackend`` (nothing is judged); the isolation of the task's imports runs
on the real simulator backend, jailed where the jail works.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from nki_agent.runner.layout import KERNEL_DIR, TASK_DIR, BundledJobRequest, ShadowError, check, prepare
from nki_agent.toolchain.protocol.jobs import SourceFile
from nki_agent.toolchain.isolation.runner import LocalRunner
from remote_kernels import TASK, small_add
from runner_fakes import GateBackend, running

KERNEL = "import helper\n\ndef nki_kernel(a):\n    return a\n"
TASK_WITH_HELPER = "import numpy as np\nfrom helper import OFFSET\n\ndef get_inputs():\n    return []\n"


def _files(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"name": n, "text": t} for n, t in pairs]


def _body(modules: list[dict[str, str]], task_modules: list[dict[str, str]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"op": "verify", "kernel": {"name": "kernel.py", "text": KERNEL},
                            "task": {"name": "task.py", "text": TASK_WITH_HELPER}, "modules": modules}
    if task_modules is not None:
        body["task_modules"] = task_modules
    return body


def test_prepare_writes_the_two_bundles_into_two_folders(tmp_path: Path) -> None:
    req = BundledJobRequest.model_validate(_body(_files(("helper.py", "OFFSET = 0.0\n")),
                                                 _files(("helper.py", "OFFSET = 1.0\n"))))
    job = prepare("j1", req, str(tmp_path))
    assert job.kernel_path == str(tmp_path / KERNEL_DIR / "kernel.py")
    assert job.task_path == str(tmp_path / TASK_DIR / "task.py")
    assert (tmp_path / KERNEL_DIR / "helper.py").read_text() == "OFFSET = 0.0\n"
    assert (tmp_path / TASK_DIR / "helper.py").read_text() == "OFFSET = 1.0\n"
    own = BundledJobRequest.model_validate({"op": "verify", "kernel": {"name": "k.py", "text": KERNEL},
                                            "modules": _files(("helper.py", "X = 1\n"))})
    job = prepare("j2", own, str(tmp_path / "own"))
    assert job.task_path == job.kernel_path and not (tmp_path / "own" / TASK_DIR).exists()


@pytest.mark.parametrize("modules,task_modules,module", [
    (_files(("helper.py", "OFFSET = 0.0\n")), None, "helper"),  # a flat client: the task's helper is the kernel's
    (_files(("helper.py", "OFFSET = 0.0\n")), _files(("helper.py", "OFFSET = 1.0\n")), "helper"),
    (_files(("numpy.py", "def allclose(*a, **k):\n    return True\n")), _files(("helper.py", "OFFSET = 1.0\n")),
     "numpy"),
    (_files(("nki.py", "")), _files(("helper.py", "OFFSET = 1.0\n")), "nki"),
])
def test_a_shadowing_kernel_module_is_refused_naming_it(tmp_path: Path, modules: list[dict[str, str]],
                                                         task_modules: list[dict[str, str]] | None,
                                                         module: str) -> None:
    with running(tmp_path, GateBackend()) as (runner, client):
        resp = client.post("/v1/jobs", json=_body(modules, task_modules))
        assert resp.status_code == 422, resp.text
        assert f"'{module}'" in resp.json()["error"] and "shadows" in resp.json()["error"]
        assert runner.manager.load()["queued"] == 0 and runner.store.count("queued") == 0  # nothing stored


def test_the_same_helper_in_both_bundles_is_accepted(tmp_path: Path) -> None:
    gate = GateBackend()
    gate.gate.set()
    with running(tmp_path, gate) as (_, client):
        same = _files(("helper.py", "OFFSET = 1.0\n"))
        assert client.post("/v1/jobs?wait=60", json=_body(same, same)).json()["state"] == "done"


def test_check_names_the_module() -> None:
    req = BundledJobRequest(op="verify", kernel=SourceFile(name="kernel.py", text=KERNEL),
                            task=SourceFile(name="task.py", text=TASK_WITH_HELPER),
                            modules=[SourceFile(name="helper.py", text="OFFSET = 0.0\n")])
    with pytest.raises(ShadowError) as e:
        check(req)
    assert e.value.module == "helper"


PEEK = '''
import importlib.util as _util

# computed at run time, so no client or runner check reads it as an import: can the task see the kernel's folder?
_SEEN = _util.find_spec("kernel" + "_side") is not None


def reference(a, b):
    return a + b + (1.0 if _SEEN else 0.0)
'''


def test_the_tasks_imports_never_resolve_in_the_kernels_folder(tmp_path: Path, runner_factory: Any) -> None:
    """The kernel's bundle holds ``kernel_side.py``; the task looks for it by a computed name and would
    answer a wrong reference if it found it. On the runner it does not (two folders), as locally."""
    kernel, _ = small_add(tmp_path / "k")
    kernel.write_text("import kernel_side\n" + kernel.read_text())
    (tmp_path / "k" / "kernel_side.py").write_text("MARK = 1\n")
    task = tmp_path / "t" / "task.py"
    task.parent.mkdir()
    task.write_text(TASK.replace("def reference(a, b):\n    return a + b\n", "") + PEEK)
    local = LocalRunner().verify(str(kernel), str(task), seeds=1, timeout=120.0)
    live = runner_factory()
    remote = live.client().verify(str(kernel), str(task), seeds=1, timeout=120.0)
    assert not remote.problems, [p.message for p in remote.problems]
    assert remote.correct is True and local.correct is True
