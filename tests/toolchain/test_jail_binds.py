"""What a kernel's jail binds of the user's folder: the kernel file and the modules it imports, nothing else.

``jail_imports.closure`` unit tests (sibling modules, packages in subfolders, relative imports, constant
``import_module`` names, cycles, shadowing order), then real jailed runs: a kernel importing a sibling
helper and a package verifies, while ``.git``, backups, ``.env`` and unimported modules of the same
folder cannot be opened — in the kernel's own folder and through the ``search_path`` folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from nki_agent.toolchain import api
from nki_agent.toolchain.isolation import jail, jail_imports, sandbox

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tests" / "fixtures" / "hostile_corpus" / "task.py"

KERNEL = '''import os
import nki
import nki.isa as nisa
import nki.language as nl
from my_helpers import tile_op
import pkg.sub
from pkg import other

PROBES = {PROBES!r}


def _seen():
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    for name in PROBES:
        try:
            with open(os.path.join(here, name), "rb") as f:
                f.read(1)
            found.append(name)
        except OSError:
            pass
    return found


@nki.jit
def add_kernel(a, b):
    seen = _seen()
    op = tile_op() if not seen and pkg.sub.OK and other.OK else nl.subtract
    n_rows, n_cols = a.shape
    out = nl.ndarray((n_rows, n_cols), dtype=a.dtype, buffer=nl.shared_hbm)
    for r0 in range(0, n_rows, 128):
        a_t = nl.ndarray((128, n_cols), dtype=a.dtype, buffer=nl.sbuf)
        b_t = nl.ndarray((128, n_cols), dtype=b.dtype, buffer=nl.sbuf)
        c_t = nl.ndarray((128, n_cols), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_t, src=a[r0:r0 + 128, :])
        nisa.dma_copy(dst=b_t, src=b[r0:r0 + 128, :])
        nisa.tensor_tensor(dst=c_t, data1=a_t, data2=b_t, op=op)
        nisa.dma_copy(dst=out[r0:r0 + 128, :], src=c_t)
    return out
'''
PROBES = [".git/HEAD", ".git/config", ".env", "task.py~", ".task.py.swp", "task_copy.py", "unused.py", "notes.txt",
          "pkg/unused.py", "task.py"]


def _helpers(folder: Path) -> None:
    (folder / "my_helpers.py").write_text("import nki.language as nl\n\n\ndef tile_op():\n    return nl.add\n")
    (folder / "pkg").mkdir()
    (folder / "pkg" / "__init__.py").write_text("")
    (folder / "pkg" / "sub.py").write_text("from . import deep\nOK = deep.OK\n")
    (folder / "pkg" / "deep.py").write_text("OK = True\n")
    (folder / "pkg" / "other.py").write_text("OK = True\n")
    (folder / "pkg" / "unused.py").write_text("SECRET = 1\n")


def _decoys(folder: Path) -> None:
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / ".git" / "config").write_text("[core]\n")
    for name in ("task.py~", ".task.py.swp", "task_copy.py"):
        (folder / name).write_text(TASK.read_text())
    (folder / ".env").write_text("ANTHROPIC_API_KEY=nkicanary-000000000000000000000000\n")
    (folder / "unused.py").write_text("X = 1\n")
    (folder / "notes.txt").write_text("private\n")


def test_imported_names_cover_every_import_form() -> None:
    src = ("import a.b\nfrom c import d, e\nfrom . import f\nfrom ..g import h\nimport importlib\n"
           "def k():\n    import m\n    importlib.import_module('n.o')\n    __import__('p')\n"
           "try:\n    import q\nexcept ImportError:\n    pass\nimportlib.import_module(name)\n")
    names = jail_imports.imported_names(src, "pkg.sub.mod")
    assert set(names) == {"a.b", "c", "c.d", "c.e", "pkg.sub", "pkg.sub.f", "pkg.g", "pkg.g.h", "importlib", "m",
                          "n.o", "p", "q"}
    assert jail_imports.imported_names("from . import x\n") == []  # top-level module: no package to be relative to
    assert jail_imports.imported_names("def (:\n") == []


def test_the_closure_is_the_kernel_and_what_it_imports(tmp_path: Path) -> None:
    _helpers(tmp_path)
    _decoys(tmp_path)
    kernel = tmp_path / "kernel.py"
    kernel.write_text(KERNEL.replace("{PROBES!r}", "[]"))
    got = {Path(p).relative_to(tmp_path).as_posix() for p in jail_imports.closure(str(kernel), [str(tmp_path)])}
    assert got == {"kernel.py", "my_helpers.py", "pkg/__init__.py", "pkg/sub.py", "pkg/deep.py", "pkg/other.py"}


def test_the_kernels_folder_shadows_the_search_path_and_cycles_end(tmp_path: Path) -> None:
    here, there = tmp_path / "copy", tmp_path / "user"
    here.mkdir()
    there.mkdir()
    (here / "kernel.py").write_text("import a\nimport b\n")
    (here / "a.py").write_text("import b\n")
    (there / "a.py").write_text("import never_bound\n")
    (there / "b.py").write_text("import a\nimport numpy\n")
    (there / "never_bound.py").write_text("")
    got = jail_imports.closure(str(here / "kernel.py"), [str(here), str(there)])
    assert got[0] == str(here / "kernel.py")
    assert set(got) == {str(here / "kernel.py"), str(here / "a.py"), str(there / "b.py")}


def test_hidden_files_are_never_bound(tmp_path: Path) -> None:
    (tmp_path / "kernel.py").write_text("import task\n")
    shutil.copy(TASK, tmp_path / "task.py")
    files = jail_imports.binds([(str(tmp_path / "kernel.py"), [str(tmp_path)])], hidden=[str(tmp_path / "task.py")])
    assert files == (str(tmp_path / "kernel.py"),)


def test_a_kernel_job_binds_files_and_other_jobs_bind_folders(tmp_path: Path) -> None:
    _helpers(tmp_path)
    (tmp_path / "kernel.py").write_text("from my_helpers import tile_op\n")
    shutil.copy(TASK, tmp_path / "task.py")
    req = {"kernel": str(tmp_path / "kernel.py"), "task": str(tmp_path / "task.py"), "search_path": []}
    for op in ("kernel", "trace"):
        job = sandbox.Job(dict(req, op=op), hidden=(str(tmp_path / "task.py"),))
        assert set(sandbox._readable(job)) == {str(tmp_path / "kernel.py"), str(tmp_path / "my_helpers.py")}
    sim = sandbox.Job(dict(req, op="simulate"))
    assert set(sandbox._readable(sim)) == {str(tmp_path / "kernel.py"), str(tmp_path / "my_helpers.py"),
                                           str(tmp_path / "task.py")}
    assert sandbox._readable(sandbox.Job(dict(req, op="reference"))) == (str(tmp_path),)
    # the executor (no user code) names its files under other keys: with imports_only nothing of them is bound
    execute = {"op": "execute", "kernel_file": req["kernel"], "task_file": req["task"]}
    assert sandbox._readable(sandbox.Job(execute, imports_only=True)) == ()


needs_jail = pytest.mark.skipif(not jail.status().available, reason=f"no jail here: {jail.status().reason}")


@needs_jail
@pytest.mark.parametrize("through", ["own_folder", "search_path"])
def test_helpers_import_and_nothing_else_of_the_folder_opens(tmp_path: Path, through: str) -> None:
    """The kernel imports a sibling helper and a package (it adds only if all of them imported and none of the
    probes opened): verified. Through ``search_path`` the kernel is a private copy in another folder, as the fix
    agent runs candidates."""
    user = tmp_path / "user"
    user.mkdir()
    _helpers(user)
    _decoys(user)
    shutil.copy(TASK, user / "task.py")
    text = KERNEL.replace("{PROBES!r}", repr(PROBES))
    if through == "own_folder":
        kernel, search = user / "kernel.py", []
    else:
        (tmp_path / "copy").mkdir()
        kernel, search = tmp_path / "copy" / "kernel.py", [str(user)]
        text = text.replace("os.path.dirname(os.path.abspath(__file__))", repr(str(user)))
    kernel.write_text(text)
    res = api.verify(str(kernel), str(user / "task.py"), seeds=1, search_path=search, timeout=120.0)
    assert res.sandbox == "bwrap", res
    assert res.correct, res.model_dump_json()[:3000]
