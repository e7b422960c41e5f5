"""``search_path``: a kernel verified from a copy imports the sibling modules of the user's folder.

The copy's own folder comes first (a file there shadows the user's file of the same module name),
the user's folder after it, and nothing is written into the user's folder (no ``__pycache__``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from nki_agent.toolchain import api

ROOT = Path(__file__).resolve().parents[2]
ADD = ROOT / "examples" / "l1_add"
ADD_CALL = "nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)"


def _helpers(module: str, op: str) -> str:
    return (f"import nki.isa as nisa\nimport nki.language as nl\n\nHELPERS = {module!r}\n\n\n"
            f"def tile_add(dst, a, b):\n    nisa.tensor_tensor(dst=dst, data1=a, data2=b, op=nl.{op})\n")


def _setup(tmp_path: Path, module: str) -> tuple[Path, Path, str, str]:
    """proj/ (the user's folder: kernel, helper module), tasks/ (the task, elsewhere: nothing but the
    search path reaches the helper) and run/ (the candidate's copy)."""
    proj, run, tasks = tmp_path / "proj", tmp_path / "run", tmp_path / "tasks"
    for d in (proj, run, tasks):
        d.mkdir()
    src = (ADD / "kernel_new.py").read_text()
    assert ADD_CALL in src
    text = (src.replace("import nki.language as nl\n", f"import nki.language as nl\nfrom {module} import tile_add\n")
            .replace(ADD_CALL, "tile_add(c_tile, a_tile, b_tile)"))
    (proj / f"{module}.py").write_text(_helpers(module, "add"))
    (proj / "kernel.py").write_text(text)
    (tasks / "task.py").write_text((ADD / "task.py").read_text().replace("2112, 1024", "200, 64"))
    (run / "kernel.py").write_text(text)
    return proj, run, str(run / "kernel.py"), str(tasks / "task.py")


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<dir>" for p in folder.rglob("*")}


@pytest.fixture
def clean_bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytecode writing on, as in a user's shell: only the toolchain may turn it off."""
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(sys, "path", list(sys.path))


def test_the_sandboxed_worker_imports_from_the_search_path(tmp_path: Path, clean_bytecode: None) -> None:
    proj, _, kernel, task = _setup(tmp_path, "sib_helpers_sandbox")
    before = _tree(proj)
    assert api.verify(kernel, task, seeds=1).correct is False  # without it: ModuleNotFoundError
    res = api.verify(kernel, task, seeds=2, search_path=[str(proj)])
    assert res.correct is True, res.problems
    sim = api.simulate(kernel, task, search_path=[str(proj)])
    assert sim.ran is True, sim.problems
    assert api.describe_task(task, search_path=[str(proj)]).problems == []
    assert _tree(proj) == before


def test_in_process_loads_write_no_bytecode_into_the_users_folder(tmp_path: Path, clean_bytecode: None) -> None:
    module = "sib_helpers_in_process"  # unique: the test process keeps what it imported
    proj, _, kernel, task = _setup(tmp_path, module)
    before = _tree(proj)
    try:
        res = api.verify(kernel, task, seeds=1, isolate=False, search_path=[str(proj)])
        assert res.correct is True, res.problems
        assert sys.path.index(str(tmp_path / "run")) < sys.path.index(str(proj))
    finally:
        sys.modules.pop(module, None)
    assert _tree(proj) == before and not (proj / "__pycache__").exists()


def test_the_copys_folder_shadows_the_users_folder(tmp_path: Path) -> None:
    """A helper of the same name next to the copy wins over the user's (which would compute a - b)."""
    proj, run, kernel, task = _setup(tmp_path, "sib_helpers_shadow")
    (proj / "sib_helpers_shadow.py").write_text(_helpers("user", "subtract"))
    (run / "sib_helpers_shadow.py").write_text(_helpers("copy", "add"))
    res = api.verify(kernel, task, seeds=1, search_path=[str(proj)])
    assert res.correct is True, res.problems
    confined = api.verify(kernel, task, seeds=1, search_path=[str(proj)])
    assert confined.correct is True, confined.problems


def test_a_missing_or_relative_search_folder_is_harmless(tmp_path: Path) -> None:
    from nki_agent.toolchain.tasks import search_dirs

    kernel = tmp_path / "k.py"
    assert search_dirs(str(kernel), [str(tmp_path / "nope"), "", str(tmp_path)]) == [str(tmp_path)]
    assert search_dirs(str(kernel), [str(ROOT)]) == [str(tmp_path), str(ROOT)]
