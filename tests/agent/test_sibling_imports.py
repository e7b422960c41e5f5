"""A kernel that imports a sibling module of the user's folder is compiled and verified by the agent.

The tools run a private temp copy of the kernel; the user's kernel folder comes after the copy's on
the import path, so ``from my_helpers import tile_add`` works, while the task (and, for a file that
is its own task, the user's original) stays closed to confined candidates and the user's folder is
never written (no ``__pycache__``, no new files).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from agent_scripted import Scripted, call
from nki_agent.agent.loop import AgentConfig, run_agent
from nki_agent.agent.protocol import ToolCall
from nki_agent.agent.snapshot import Snapshot
from nki_agent.agent.tools import ToolBox
from nki_agent.diagnostics import compiler as compiler_module
from nki_agent.diagnostics.compiler import CompileResult, Sdk

ROOT = Path(__file__).resolve().parents[2]
ADD = ROOT / "examples" / "l1_add"
ADD_CALL = "nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)"
TASK_TEXT = (ADD / "task.py").read_text().replace("2112, 1024", "200, 64")  # small: every run spawns a worker
SELF_TASK = ("\n\ndef get_inputs():\n    return [np.random.randn(200, 64).astype(np.float32),\n"
             "            np.random.randn(200, 64).astype(np.float32)]\n\n\ndef reference(a, b):\n    return a + b\n")


def _kernel(module: str) -> str:
    src = (ADD / "kernel_new.py").read_text()
    assert ADD_CALL in src
    return (src.replace("import nki.language as nl\n", f"import nki.language as nl\nfrom {module} import tile_add\n")
            .replace(ADD_CALL, "tile_add(c_tile, a_tile, b_tile)"))


def _folder(tmp_path: Path, module: str = "my_helpers", self_task: bool = False) -> tuple[Path, Path, Path]:
    """proj/ (kernel.py + its sibling helper module) and the task: elsewhere, or kernel.py itself."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / f"{module}.py").write_text("import nki.isa as nisa\nimport nki.language as nl\n\n\n"
                                       "def tile_add(dst, a, b):\n"
                                       "    nisa.tensor_tensor(dst=dst, data1=a, data2=b, op=nl.add)\n")
    kernel = proj / "kernel.py"
    if self_task:
        kernel.write_text("import numpy as np\n" + _kernel(module) + SELF_TASK)
        return proj, kernel, kernel
    kernel.write_text(_kernel(module))
    task = tmp_path / "tasks" / "task.py"  # outside proj: nothing but the tools' search path reaches the helper
    task.parent.mkdir()
    task.write_text(TASK_TEXT)
    return proj, kernel, task


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<dir>" for p in folder.rglob("*")}


@pytest.fixture(autouse=True)
def bytecode_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytecode writing on, as in a user's shell: the tools alone must keep the user's folder clean."""
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.mark.parametrize("self_task", [False, True], ids=["task_elsewhere", "self_task"])
def test_a_kernel_importing_a_sibling_compiles_and_verifies_confined(tmp_path: Path, self_task: bool) -> None:
    proj, kernel, task = _folder(tmp_path, self_task=self_task)
    before = _tree(proj)
    tools = ToolBox(str(kernel), kernel.read_text(), str(task), self_task=self_task, seeds=2)
    try:
        assert tools.search_path == (str(proj),)
        compiled = tools.compile(tools.code)
        assert compiled.content.startswith("compile: OK"), compiled.content
        verified = tools.verify(tools.code)
        assert verified.verified and verified.sandbox == "bwrap", verified.content
    finally:
        tools.close()
    assert _tree(proj) == before


def test_a_kernel_importing_a_sibling_verifies_unconfined(tmp_path: Path) -> None:
    module = "my_helpers_unconfined"  # in-process verification: the test process keeps what it imported
    proj, kernel, task = _folder(tmp_path, module)
    before = _tree(proj)
    tools = ToolBox(str(kernel), kernel.read_text(), str(task), seeds=2, isolate=False, prefer_toolchain="embedded")
    try:
        compiled = tools.compile(tools.code)
        assert compiled.content.startswith("compile: OK"), compiled.content
        verified = tools.verify(tools.code)
        assert verified.verified and verified.sandbox == "in-process", verified.content
    finally:
        tools.close()
        sys.modules.pop(module, None)
    assert _tree(proj) == before


def test_the_agent_repairs_a_kernel_that_imports_a_sibling(tmp_path: Path) -> None:
    proj, kernel, task = _folder(tmp_path, self_task=True)
    bug = kernel.read_text().replace("tile_add(c_tile, a_tile, b_tile)", "tile_add(c_tile, a_tile, a_tile)")
    kernel.write_text(bug)
    before = _tree(proj)
    model = Scripted([call("verify", edits=[{"old": "a_tile, a_tile)", "new": "a_tile, b_tile)"}])])
    res = run_agent(Snapshot(kernel.as_uri(), 1, bug), str(kernel), str(task), model,
                    AgentConfig(trajectory_dir=str(tmp_path / "traj")), self_task=True)
    assert res.verdict == "verified", res.summary()
    assert res.edit is not None and "tile_add(c_tile, a_tile, b_tile)" in res.edit.apply(bug)
    assert _tree(proj) == before


def test_importing_the_task_through_the_folder_is_refused(tmp_path: Path) -> None:
    """The task sits in the user's folder, next to a bytecode copy a normal run left behind; the static
    guard refuses ``import task`` and, were it fooled, the kernel's jail shows the task (and its cache) empty."""
    import py_compile

    proj, kernel, _ = _folder(tmp_path)
    task = proj / "task.py"
    task.write_text(TASK_TEXT)
    py_compile.compile(str(task), doraise=True)
    before = _tree(proj)
    cheat = kernel.read_text().replace("import nki\n", "import nki\nimport task\n_ref = task.reference\n", 1)
    tools = ToolBox(str(kernel), kernel.read_text(), str(task))
    try:
        static = tools.run(ToolCall("c1", "verify", {"code": cheat}))
        assert static.is_error and static.content.startswith("refused"), static.content
        jailed = tools.verify(cheat)  # past the static guard: the jail still holds
        assert not jailed.verified
        assert "No module named 'task'" in jailed.content, jailed.content  # the task is not a file there
    finally:
        tools.close()
    assert _tree(proj) == before


def test_the_users_original_of_a_self_task_file_is_closed_and_shadowed(tmp_path: Path) -> None:
    """For a file that is its own task the user's original holds the reference: opening it is refused,
    cannot be read in the kernel's jail, and ``import kernel`` finds the candidate copy (marked
    ``CANDIDATE``), not the original."""
    _, kernel, task = _folder(tmp_path, self_task=True)
    tools = ToolBox(str(kernel), kernel.read_text(), str(task), self_task=True, seeds=1)
    probe = ("CANDIDATE = True\nimport kernel as _me\n"
             "assert getattr(_me, 'CANDIDATE', False), 'the original was imported'\n")
    try:
        assert tools.protect == (str(kernel),)
        cheat = (f"import nki\ntry:\n    _data = open({str(kernel)!r}).read()\nexcept OSError:\n    _data = ''\n"
                 "if _data:\n    raise RuntimeError('read the original')\n")
        read = tools.verify(kernel.read_text().replace("import nki\n", cheat, 1))
        assert read.verified, read.content  # it ran and could not read the original
        shadowed = tools.verify(kernel.read_text().replace("import nki\n", "import nki\n" + probe, 1))
        assert shadowed.verified, shadowed.content
    finally:
        tools.close()


def test_the_real_sdk_sees_the_users_folder_and_writes_no_bytecode(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The compile subprocess of an installed SDK gets the SDK, the user's PYTHONPATH, then the kernel's
    folder on its PYTHONPATH, and bytecode writing off (the command is captured, not run)."""
    proj, kernel, task = _folder(tmp_path)
    seen: dict[str, str] = {}
    sdk_dir = str(tmp_path / "sdk")

    def fake_run(backend: str, cmd: list[str], timeout: float, env: dict[str, str], kernel_path: str,
                 detail: str) -> CompileResult:
        seen.update(env)
        return CompileResult(backend, [], True, cmd, 0, detail)

    monkeypatch.setattr(compiler_module, "detect", lambda env=None: Sdk(neuronxcc=sdk_dir, nki=sdk_dir))
    monkeypatch.setattr(compiler_module, "_run", fake_run)
    elsewhere = str(tmp_path / "elsewhere")
    monkeypatch.setenv("PYTHONPATH", elsewhere)
    tools = ToolBox(str(kernel), kernel.read_text(), str(task))
    tools._real_sdk = True
    try:
        assert tools.compile(tools.code).content.startswith("compile: OK")
    finally:
        tools.close()
    assert seen["PYTHONPATH"].split(os.pathsep) == [sdk_dir, elsewhere, str(proj)]
    assert seen["PYTHONDONTWRITEBYTECODE"] == "1"
