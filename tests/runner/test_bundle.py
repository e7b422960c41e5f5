"""What ``RemoteRunner`` sends for a kernel (``runner/bundle.py``): files, sibling modules, safe names, the way back."""

from __future__ import annotations

from pathlib import Path

import pytest
from nki_agent.runner.bundle import BundleError, PathMap, bundle, dependencies, imported_names, safe_name
from nki_agent.toolchain.protocol import MAX_MODULES, Location, ProblemInfo, VerifyResult
from remote_kernels import sibling_project


def test_kernel_task_and_the_transitive_sibling_modules(tmp_path: Path) -> None:
    kernel, task = sibling_project(tmp_path / "proj")
    b = bundle(str(kernel), str(task))
    assert b.kernel.name == "kernel.py" and b.task is not None and b.task.name == "task.py"
    assert [m.name for m in b.modules] == ["tile_helpers.py", "tile_ops.py"]  # tile_ops via tile_helpers
    assert b.local == {"kernel.py": str(kernel), "task.py": str(task),
                       "tile_helpers.py": str(tmp_path / "proj" / "tile_helpers.py"),
                       "tile_ops.py": str(tmp_path / "proj" / "tile_ops.py")}


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
    assert b.task is not None and b.kernel.name != b.task.name
    assert safe_name("/x/tile_ops.py", {"tile_ops.py"}) == "tile_ops_1.py"


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
    PathMap(local, "my_kernel.py").apply(res)
    assert (res.kernel, res.task) == ("src/my-kernel.py", "src/task.py")
    assert res.problems[0].location == Location(path="src/helpers.py", line=3)
    assert res.problems[0].message == "in src/helpers.py" and res.stderr == "File src/helpers.py, line 3"
    assert res.problems[1].location is not None and res.problems[1].location.path == "/etc/other/task.py"
