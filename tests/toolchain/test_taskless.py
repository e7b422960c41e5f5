"""The task-less run's pieces (``toolchain/taskless/``): shape lines, the pre-filled line of "Add input
shapes", test discovery (by name, never by running anything), the order of the plans, and the worker's
plain JSON validating as the typed ``SimulateResult`` on both paths (jailed and in process), what ran being
the parent's word (a worker's reply cannot relabel it) and every verdict labelled self-reported."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from nki_agent.toolchain import api, taskless
from nki_agent.toolchain.protocol.jobs import KernelLaunch, SimulateResult

ROOT = Path(__file__).resolve().parents[2]
TASKLESS = ROOT / "tests" / "fixtures" / "taskless"
HOSTILE_SELF = TASKLESS / "hostile" / "self_forgery"

TWO = '''import nki
import nki.language as nl

# nki: first(x=(128, 64) bf16)


@nki.jit
def first(x):
    return x


# nki[2]: a=(256,) int32, scale=0.5, flags=[1, 2], name="y", off=None
@nki.jit(mode="simulation")
def second(a, scale=1.0, flags=(), name="", off=None):
    return a
'''


def test_shape_lines_unnamed_named_grid_and_literals() -> None:
    specs, problems = taskless.shape_specs(TWO)
    assert not problems
    assert specs["first"].args == (taskless.Arg("x", (128, 64), "bfloat16"),)
    s = specs["second"]
    assert s.grid == (2,) and s.line == 12
    assert [(a.name, a.shape, a.dtype, a.value) for a in s.args] == [
        ("a", (256,), "int32", None), ("scale", None, "", 0.5), ("flags", None, "", [1, 2]), ("name", None, "", "y"),
        ("off", None, "", None)]


def test_a_named_line_wins_over_the_line_above_and_prose_is_ignored() -> None:
    text = ("# nki: k(a=(1, 2) float16)\n# nki: this comment is prose, not a shape line\n# nki-task: task.py\n"
            "# nki: a=(9, 9) float32\n@nki.jit\ndef k(a):\n    pass\n")
    specs, problems = taskless.shape_specs(text)
    assert not problems and specs["k"].args[0].shape == (1, 2) and specs["k"].line == 1


@pytest.mark.parametrize("line, says", [
    ("# nki: a=(128, 64) floaty", "unknown dtype `floaty`"),
    ("# nki: a=(0, 64) float32", "between 1 and"),
    ("# nki: b=(128, 64) float32", "has no parameter `b`"),
    ("# nki: a=(128, 64) float32, a=(1,) float32", "named twice"),
    ("# nki: a=what ever", "neither a tensor"),
    ("# nki[0]: a=(128, 64) float32", "grid"),
    ("# nki: a=(65536, 65536) float32", "elements"),
])
def test_a_malformed_shape_line_is_a_problem_at_its_line(line: str, says: str) -> None:
    specs, problems = taskless.shape_specs(f"import nki\n{line}\n@nki.jit\ndef k(a):\n    pass\n")
    assert not specs and len(problems) == 1
    assert problems[0].line == 2 and says in problems[0].message
    assert problems[0].column == line.index(":") + 3  # 1-based, where the arguments start


def test_a_line_with_no_kernel_below_says_to_name_one() -> None:
    _, problems = taskless.shape_specs("@nki.jit\ndef k(a):\n    pass\n# nki: a=(1, 2) float32\n")
    assert "no kernel below" in problems[0].message


def test_the_prefilled_line_keeps_known_shapes_and_placeholders_the_rest() -> None:
    text = "class C:\n    @nki.jit\n    def k(a, b, c=3, *, d):\n        pass\n"
    [k] = taskless.kernel_defs(taskless.parse(text), text)
    assert k.required == ("a", "b", "d") and k.first_line == 2
    line = taskless.shape_line(k, {"a": ((64, None), "nl.bfloat16"), "b": ((7,), "weird")})
    assert line == "    # nki: a=(64, 128) bfloat16, b=(7,) float32, d=(128, 128) float32"
    specs, problems = taskless.shape_specs(text.replace("    @nki.jit", line + "\n    @nki.jit"))
    assert not problems and [a.shape for a in specs["k"].args] == [(64, 128), (7,), (128, 128)]


@pytest.mark.parametrize("signature,body,line", [
    # the nki-samples MX kernel: a dtype parameter (by name, and passed as dtype=) is a value to fill in
    ("data, scale, mx_dtype", "    t = data.ap(dtype=mx_dtype)\n",
     "# nki: data=(128, 128) float32, scale=(128, 128) float32, mx_dtype=?"),
    ("x, kind", "    y = nl.ndarray((128, 4), dtype=kind)\n", "# nki: x=(128, 128) float32, kind=?"),
    ("x, n: int, flag: bool", "    pass\n", "# nki: x=(128, 128) float32, n=?, flag=?"),
    ("x, n", "    for i in nl.affine_range(n):\n        pass\n", "# nki: x=(128, 128) float32, n=?"),
    ("x, use_copy: bool = True", "    pass\n", "# nki: x=(128, 128) float32"),  # a default: not an input
    ("x_dtype", "    y = x_dtype[0:128, 0:4]\n", "# nki: x_dtype=(128, 128) float32"),  # indexed: a tensor
], ids=["dtype-param", "dtype-keyword", "annotated", "loop-count", "default", "tensor-named-like-dtype"])
def test_the_prefilled_line_asks_for_values_instead_of_guessing_tensors(signature: str, body: str, line: str) -> None:
    text = f"@nki.jit\ndef k({signature}):\n{body}"
    [k] = taskless.kernel_defs(taskless.parse(text), text)
    assert taskless.shape_line(k, {}) == line
    _, problems = taskless.shape_specs(line + "\n" + text)
    assert ("?" in line) == bool(problems)
    assert all("write the value the kernel takes" in p.message for p in problems)


def _workspace(tmp_path: Path) -> Path:
    (tmp_path / "kernels").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "kernels" / "mykern.py").write_text("@nki.jit\ndef my_add(a, b):\n    pass\n")
    return tmp_path


def test_tests_are_found_by_name_and_ranked(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    kernel = root / "kernels" / "mykern.py"
    marker = root / "executed"
    (root / "tests" / "test_bench.py").write_text(
        f"open({str(marker)!r}, 'w')\nfrom kernels.mykern import my_add\n\n"
        "def test_speed():\n    my_add.benchmark_result\n\n"
        "class TestAdd:\n    @pytest.mark.simulation\n    def test_values(self):\n        nki.simulate_kernel(my_add, 1, 2)\n")
    (root / "tests" / "test_alias.py").write_text("import mykern\nrun = mykern.my_add\n\ndef test_via_alias():\n    run()\n")
    (root / "tests" / "test_other.py").write_text("from other import my_add\n\ndef test_x():\n    my_add()\n")
    (root / "tests" / "test_unrelated.py").write_text("import mykern\n\ndef test_y():\n    pass\n")
    found = taskless.find_tests(str(kernel), ["my_add"], str(root))
    assert [t.label for t in found] == ["test_bench.py::TestAdd::test_values", "test_alias.py::test_via_alias",
                                        "test_bench.py::test_speed"]
    assert not marker.exists()  # discovery reads test files, it never runs them


def test_outside_the_workspace_only_the_kernels_folder_is_searched(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    (root / "tests" / "test_k.py").write_text("import mykern\n\ndef test_k():\n    mykern.my_add()\n")
    elsewhere = tmp_path / "other_root"
    elsewhere.mkdir()
    assert taskless.find_tests(str(root / "kernels" / "mykern.py"), ["my_add"], str(elsewhere)) == []
    assert taskless.test_scope(str(root / "kernels" / "mykern.py"), str(root)) == str(root)


def test_module_names_follow_packages(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("")
    assert taskless.module_names(str(tmp_path / "pkg" / "sub" / "k.py")) == ["k", "sub.k", "pkg.sub.k"]


def test_plans_are_in_order(tmp_path: Path) -> None:
    text = (TASKLESS / "add_main.py").read_text().replace("@nki.jit", "# nki: x_in=(128, 512) float32, "
                                                          "y_in=(128, 512) float32\n@nki.jit")
    facts = taskless.read_facts(str(tmp_path / "add_main.py"), text, str(tmp_path))
    assert [p.via for p in taskless.plans(facts)] == ["main", "shapes"]
    assert [p.label for p in taskless.plans(facts)] == ["__main__", "the shape line"]


@pytest.mark.parametrize("isolate", [True, False], ids=["jailed", "in_process"])
@pytest.mark.parametrize("name, via", [("add_main.py", "main"), ("add_shapes.py", "shapes"),
                                       ("pytest_style/scale_lib.py", "test"), ("add_bare.py", "none")])
def test_the_worker_answer_is_the_typed_result(tmp_path: Path, name: str, via: str, isolate: bool) -> None:
    kernel = tmp_path / Path(name).name
    shutil.copy(TASKLESS / name, kernel)
    if via == "test":
        shutil.copy(TASKLESS / "pytest_style" / "scale_lib_test_source.py", tmp_path / "test_scale_lib.py")
    res = api.simulate_taskless(str(kernel), root=str(tmp_path), isolate=isolate, timeout=60)
    assert isinstance(res, SimulateResult) and res.via == via
    assert not [p for p in res.problems if p.code == "sim_worker_crash"], res.problems
    if via == "none":
        assert not res.ran and not res.launches and not res.self_reported
        return
    assert res.ran and res.launches and res.trace and res.kernel_name == res.launches[0].kernel_name
    assert res.inputs == res.launches[0].inputs and all(i.shape for i in res.inputs)
    assert res.sandbox == ("in-process" if not isolate else res.sandbox)
    assert res.self_reported  # the file's own code ran in the worker that answered
    again = SimulateResult.model_validate_json(res.model_dump_json())  # crosses any boundary as is
    assert again == res


def test_a_driver_that_launches_no_kernel_gives_way_to_the_shape_line(tmp_path: Path) -> None:
    kernel = tmp_path / "k.py"
    kernel.write_text((TASKLESS / "add_shapes.py").read_text() + '\n\nif __name__ == "__main__":\n    print("hi")\n')
    res = api.simulate_taskless(str(kernel), root=str(tmp_path), timeout=60)
    assert res.via == "shapes" and res.ran and res.tried == ["__main__ launched no kernel of this file"]


def test_a_driver_that_checks_nothing_is_told_apart() -> None:
    text = (TASKLESS / "add_main.py").read_text()
    assert taskless.main_checks(taskless.parse(text))
    assert not taskless.main_checks(taskless.parse(text.replace("    assert ok\n", "    print(ok)\n")))
    assert taskless.main_checks(taskless.parse(text.replace("    assert ok\n", "    np.testing.assert_allclose(z, x)\n")))


def _forged(kernel: str, **claims: object) -> SimulateResult:
    """A reply as a hostile file would write it: a clean run of some other source, not self-reported."""
    forged: dict[str, object] = {"kernel": "elsewhere.py", "ran": True, "self_reported": False,
                                 "launches": [KernelLaunch(kernel_name="add_kernel")], "kernel_name": "add_kernel"}
    return SimulateResult.model_validate({**forged, **claims})


def test_what_ran_is_the_parents_word_never_the_workers_reply(tmp_path: Path) -> None:
    kernel = tmp_path / "add_lib.py"
    kernel.write_text(HOSTILE_SELF.joinpath("forge_test_verdict.py").read_text())
    shutil.copy(HOSTILE_SELF / "add_lib_test_source.py", tmp_path / "test_add_lib.py")
    asked: list[dict[str, object]] = []

    def run_one(req: dict[str, object]) -> SimulateResult:
        asked.append(req)
        claims = {"main": {"via": "test", "via_test": "test_add_lib.py::test_add"},  # the driver claims the test
                  "test": {"via": "main", "via_test": ""}}[str(req["via"])]  # the test's process claims the driver
        return _forged(str(req["kernel"]), **claims)

    res = taskless.simulate(str(kernel), run_one, root=str(tmp_path))
    assert [r["via"] for r in asked] == ["main"]  # the driver "launched": the test is not run
    assert (res.via, res.via_test, res.kernel, res.self_reported) == ("main", "", str(kernel), True)
    kernel.write_text(kernel.read_text().replace('if __name__ == "__main__":', "if False:"))  # no driver now
    asked.clear()
    res = taskless.simulate(str(kernel), run_one, root=str(tmp_path))
    assert [r["via"] for r in asked] == ["test"]
    assert (res.via, res.via_test, res.self_reported) == ("test", "test_add_lib.py::test_add", True)


def test_a_clean_run_says_whose_word_it_is_and_never_that_the_test_passes() -> None:
    def claim(via: str, checks: bool = True) -> str:
        return taskless.claim(SimulateResult(kernel="k.py", via=via, ran=True, self_reported=True), checks)

    assert claim("main") == "its checks pass — self-reported by the file"
    assert claim("main", checks=False) == "ran, nothing checked — self-reported by the file"
    assert claim("test") == "the test's worker reported a pass — self-reported by the file (the test imports it)"
    assert claim("shapes") == "nothing to compare with — self-reported by the file"
    assert all("passes" not in claim(v) for v in ("test", "shapes")) and claim("none") == ""


def test_a_driver_forging_a_test_verdict_is_reported_as_the_driver_it_is(tmp_path: Path) -> None:
    """The measured attack, jailed: the driver writes a well-formed "via test, passes" reply and exits."""
    kernel = tmp_path / "add_lib.py"
    shutil.copy(HOSTILE_SELF / "forge_test_verdict.py", kernel)
    shutil.copy(HOSTILE_SELF / "add_lib_test_source.py", tmp_path / "test_add_lib.py")
    res = api.simulate_taskless(str(kernel), root=str(tmp_path), timeout=60)
    assert (res.via, res.via_test, res.self_reported) == ("main", "", True), res
