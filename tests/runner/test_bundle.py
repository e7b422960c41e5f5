"""What ``RemoteRunner`` sends for a kernel (``runner/bundle.py``): files, sibling modules, safe names, the way back."""

from __future__ import annotations

from pathlib import Path

import pytest
from nki_agent.runner.bundle import BundleError, PathMap, bundle, dependencies, imported_names, safe_name
from nki_agent.toolchain.protocol.jobs import MAX_MODULES, Location, ProblemInfo, VerifyResult
from remote_kernels import sibling_project


def test_kernel_task_and_the_transitive_sibling_modules(tmp_path: Path) -> None:
    kernel, task = sibling_project(tmp_path / "proj")
    b = bundle(str(kernel), str(task))
    assert b.kernel.name == "kernel.py" and b.task is not None and b.task.name == "task.py"
    assert [m.name for m in b.modules] == ["tile_helpers.py", "tile_ops.py"]  # tile_ops via tile_helpers
    assert b.local == {"kernel.py": str(kernel),
                       "tile_helpers.py": str(tmp_path / "proj" / "tile_helpers.py"),
                       "tile_ops.py": str(tmp_path / "proj" / "tile_ops.py")}
    assert b.task_modules == [] and b.task_local == {"task.py": str(task)}  # the task imports no sibling


def test_a_kernel_that_is_its_own_task_is_sent_once(tmp_path: Path) -> None:
    k = tmp_path / "k.py"
    k.write_text("import numpy as np\n\ndef get_inputs():\n    return []\n")
    b = bundle(str(k), str(k))
    assert b.task is None and b.modules == [] and b.local == {"k.py": str(k)}


def test_only_existing_top_level_modules_of_the_folders_are_sent(tmp_path: Path) -> None:
    proj, shared = tmp_path / "proj", tmp_path / "shared"
    (proj / "pkg").mkdir(parents=True)
    shared.mkdir()
    (proj / "pkg" / "__init__.py").write_text("")
    (shared / "from_search_path.py").write_text("X = 1\n")
    (proj / "binary.py").write_bytes(b"\x00\x01")
    (proj / "secret.py").write_text("ANSWER = 42\n")
    kernel = proj / "kernel.py"
    kernel.write_text("import numpy as np\nimport pkg.sub\nimport binary\nimport secret\nfrom . import rel\n"
                      "def f():\n    import from_search_path\n")
    b = bundle(str(kernel), str(kernel), search_path=[str(shared)], protect=[str(proj / "secret.py")])
    assert [m.name for m in b.modules] == ["from_search_path.py"]  # no package, binary, protected or stdlib


def test_modules_are_capped(tmp_path: Path) -> None:
    names = [f"m{i}" for i in range(MAX_MODULES + 5)]
    for n in names:
        (tmp_path / f"{n}.py").write_text("")
    kernel = tmp_path / "kernel.py"
    kernel.write_text("".join(f"import {n}\n" for n in names))
    assert len(bundle(str(kernel), str(kernel)).modules) == MAX_MODULES


@pytest.mark.parametrize("name,safe", [("kernel.py", "kernel.py"), ("my-kernel.py", "my_kernel.py"),
                                       ("1st.py", "m_1st.py"), ("k.v2.py", "k_v2.py"), ("ä.py", "_.py")])
def test_safe_names(name: str, safe: str) -> None:
    assert safe_name(f"/x/{name}") == safe


def test_a_safe_name_avoids_the_other_files(tmp_path: Path) -> None:
    _, task = sibling_project(tmp_path / "a", "task.py")  # kernel and task both named task.py
    other = tmp_path / "b" / "task.py"
    other.parent.mkdir()
    other.write_text((tmp_path / "a" / "task.py").read_text().replace("tile_add", "x"))
    b = bundle(str(other), str(task))
    assert b.task is not None and b.kernel.name == b.task.name == "task.py"  # two folders on the runner
    assert safe_name("/x/tile_ops.py", {"tile_ops.py"}) == "tile_ops_1.py"
    assert safe_name("/x/profile.py") == "profile_.py"  # an installed module's name is never taken


def test_unreadable_kernels_are_bundle_errors(tmp_path: Path) -> None:
    with pytest.raises(BundleError) as e:
        bundle(str(tmp_path / "none.py"), str(tmp_path / "none.py"))
    assert e.value.path == str(tmp_path / "none.py")
    big = tmp_path / "big.py"
    big.write_text("#" * (300 * 1024))
    with pytest.raises(BundleError, match="limited"):
        bundle(str(big), str(big))


def test_imports_of_a_broken_file_are_none() -> None:
    assert imported_names("import a\nfrom b.c import d\ndef (:\n") == []
    assert imported_names("import a.b, c\nfrom d import e\nfrom .f import g\n") == ["a", "c", "d"]


def test_dependencies_are_local_paths(tmp_path: Path) -> None:
    kernel, task = sibling_project(tmp_path / "proj")
    deps = dependencies(str(kernel), str(task))
    assert deps == [str(kernel), str(task), str(tmp_path / "proj" / "tile_helpers.py"),
                    str(tmp_path / "proj" / "tile_ops.py")]


def test_path_map_brings_the_runners_paths_home() -> None:
    job = "/srv/runner/jobs/job-1234"
    res = VerifyResult(kernel=f"{job}/my_kernel.py", task=f"{job}/task.py", stderr=f"File {job}/helpers.py, line 3",
                       problems=[ProblemInfo(code="sim_python_exception", message=f"in {job}/helpers.py",
                                             location=Location(path=f"{job}/helpers.py", line=3)),
                                 ProblemInfo(code="x", message="", location=Location(path="/etc/other/task.py", line=1))])
    local = {"my_kernel.py": "src/my-kernel.py", "task.py": "src/task.py", "helpers.py": "src/helpers.py"}
    PathMap(local, "my_kernel.py").apply(res)  # one folder: a client of the flat layout
    assert (res.kernel, res.task) == ("src/my-kernel.py", "src/task.py")
    assert res.problems[0].location == Location(path="src/helpers.py", line=3)
    assert res.problems[0].message == "in src/helpers.py" and res.stderr == "File src/helpers.py, line 3"
    assert res.problems[1].location is not None and res.problems[1].location.path == "/etc/other/task.py"


def test_path_map_knows_the_kernel_folder_from_the_task_folder() -> None:
    job = "/srv/runner/jobs/job-1234"
    res = VerifyResult(kernel=f"{job}/kernel/kernel.py", task=f"{job}/task/task.py",
                       stderr=f"File {job}/task/helper.py, line 2 / File {job}/kernel/helper.py, line 5",
                       problems=[ProblemInfo(code="x", message="", location=Location(path=f"{job}/task/helper.py", line=2)),
                                 ProblemInfo(code="y", message="", location=Location(path=f"{job}/kernel/helper.py",
                                                                                    line=5))])
    PathMap({"kernel.py": "k/kernel.py", "helper.py": "k/helper.py"}, "kernel.py",
            {"task.py": "t/task.py", "helper.py": "t/helper.py"}, "task.py").apply(res)
    assert (res.kernel, res.task) == ("k/kernel.py", "t/task.py")
    assert [p.location.path for p in res.problems if p.location] == ["t/helper.py", "k/helper.py"]
    assert res.stderr == "File t/helper.py, line 2 / File k/helper.py, line 5"


def _two_folders(tmp_path: Path, kernel_helper: str, task_helper: str) -> tuple[Path, Path]:
    (tmp_path / "k").mkdir()
    (tmp_path / "t").mkdir()
    (tmp_path / "k" / "helper.py").write_text(kernel_helper)
    (tmp_path / "t" / "helper.py").write_text(task_helper)
    kernel = tmp_path / "k" / "kernel.py"
    kernel.write_text("import helper\n")
    task = tmp_path / "t" / "task.py"
    task.write_text("import numpy as np\nfrom helper import SCALE\n")
    return kernel, task


def test_the_tasks_modules_are_its_own_bundle(tmp_path: Path) -> None:
    kernel, task = _two_folders(tmp_path, "SCALE = 2\n", "SCALE = 2\n")  # the same helper: allowed
    b = bundle(str(kernel), str(task))
    assert [m.name for m in b.modules] == ["helper.py"] and [m.name for m in b.task_modules] == ["helper.py"]
    assert b.local["helper.py"] == str(tmp_path / "k" / "helper.py")
    assert b.task_local["helper.py"] == str(tmp_path / "t" / "helper.py")


def test_a_kernel_module_shadowing_a_task_import_is_refused_before_sending(tmp_path: Path) -> None:
    kernel, task = _two_folders(tmp_path, "SCALE = 1\n", "SCALE = 2\n")
    with pytest.raises(BundleError, match="helper.py shadows the module 'helper' the task imports") as e:
        bundle(str(kernel), str(task))
    assert e.value.path == str(tmp_path / "k" / "helper.py")


def test_a_kernel_module_shadowing_an_installed_module_is_refused_before_sending(tmp_path: Path) -> None:
    (tmp_path / "numpy.py").write_text("def allclose(*a, **k):\n    return True\n")
    kernel = tmp_path / "kernel.py"
    kernel.write_text("import numpy\n")
    with pytest.raises(BundleError, match="numpy.py shadows the installed module 'numpy'"):
        bundle(str(kernel), str(kernel))
