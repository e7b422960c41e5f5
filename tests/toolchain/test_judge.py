"""Judged verification (``api.verify``: reference and kernel in separate jailed workers, the verdict here).

Each cheat is prefixed to a WRONG kernel (l1_add with ``nl.subtract``); none of them makes it verify,
and none of their side effects happens. Correct kernels verify with the same figures as an
in-process verification (``isolate=False``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from nki_agent.toolchain import api
from nki_agent.toolchain.protocol.jobs import VerifyResult

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ADD = EXAMPLES / "l1_add"
SEEDS = 2  # enough to exercise the per-seed files; every example runs, so keep it small

ISCLOSE_ALL = "lambda a, b, **k: np.ones(np.shape(a), dtype=bool)"
# (id, prefix with PATH/PATH2 placeholders, expected problem code or None: a plain mismatch)
CHEATS = [
    ("patch_isclose_alias", f"_m = np; _m.isclose = {ISCLOSE_ALL}\n", None),
    ("patch_isclose_setattr", f"_s = setattr; _s(np, 'isclose', {ISCLOSE_ALL})\n", None),
    ("patch_isclose_exec",
     "_e = exec; _e('import numpy\\nnumpy.isclose = lambda a, b, **k: numpy.ones(numpy.shape(a), dtype=bool)')\n",
     None),
    ("shell_via_eval", "_v = eval; _v(\"__import__('os').system('echo pwned > PATH')\")\n", "sim_sandbox_violation"),
    ("write_file_via_tofile", "np.frombuffer(b'x', np.uint8).tofile('PATH2')\n", "sim_sandbox_violation"),
    ("patch_task_reference_via_sys_modules",
     ("import sys\n_t = sys.modules.get('nki_agent_task')\n"
      "if _t is not None:\n    _t.reference.__code__ = (lambda a, b: a - b).__code__\n"), "sim_sandbox_violation"),
    ("read_expected_outputs_anywhere",
     ("import glob, os\nfor _f in glob.glob('/tmp/**/*.bin', recursive=True) + glob.glob('/job/**', recursive=True):\n"
      "    if os.path.isfile(_f):\n        open(_f, 'rb').read()\n"), None),
    ("frames_via_inspect", "import inspect\n_fr = inspect.currentframe()\n", "sim_sandbox_violation"),
    ("frames_via_traceback", "try:\n    raise ValueError\nexcept ValueError as _x:\n    _fr = _x.__traceback__.tb_frame\n",
     "sim_sandbox_violation"),
    ("gc_scan", "import gc\n_objs = gc.get_objects()\n", "sim_sandbox_violation"),
    ("spawn_process", "import subprocess\nsubprocess.run(['true'])\n", "sim_sandbox_violation"),
]


def _wrong_kernel(tmp_path: Path, prefix: str) -> Path:
    src = (ADD / "kernel_new.py").read_text()
    assert "op=nl.add" in src
    prefix = prefix.replace("PATH2", str(tmp_path / "written.bin")).replace("PATH", str(tmp_path / "pwned.txt"))
    path = tmp_path / "kernel.py"
    path.write_text("import numpy as np\n" + prefix + src.replace("op=nl.add", "op=nl.subtract"))
    return path


def _codes(res: VerifyResult) -> list[str]:
    return [p.code for p in res.problems]


@pytest.mark.parametrize(("prefix", "code"), [c[1:] for c in CHEATS], ids=[c[0] for c in CHEATS])
def test_a_cheat_cannot_make_a_wrong_kernel_pass(tmp_path: Path, prefix: str, code: str | None) -> None:
    kernel = _wrong_kernel(tmp_path, prefix)
    task = str(ADD / "task.py")
    res = api.verify(str(kernel), task, seeds=SEEDS)
    assert res.correct is False, res
    if code:
        assert code in _codes(res), res.problems
    else:
        assert res.mismatches > 0 and res.seeds[0].first_mismatch, res
    assert not (tmp_path / "pwned.txt").exists()
    assert not (tmp_path / "written.bin").exists()


def test_the_task_file_cannot_be_overwritten(tmp_path: Path) -> None:
    task = tmp_path / "task.py"
    original = (ADD / "task.py").read_text()
    task.write_text(original)
    kernel = _wrong_kernel(tmp_path, f"open({str(task)!r}, 'w').write('def reference(a, b):\\n    return a - b\\n')\n")
    res = api.verify(str(kernel), str(task), seeds=1)
    assert res.correct is False and "sim_sandbox_violation" in _codes(res)
    assert task.read_text() == original


def test_an_output_computed_outside_nki_is_refused(tmp_path: Path) -> None:
    kernel = tmp_path / "kernel.py"
    kernel.write_text("import numpy as np\nimport nki\n\n\n@nki.jit\ndef add_kernel(a, b):\n"
                      "    return np.zeros(a.shape, np.float32)\n")
    res = api.verify(str(kernel), str(ADD / "task.py"), seeds=1)
    assert res.correct is False
    assert _codes(res)[:1] == ["sim_sandbox_violation"], res.problems
    assert "NKI tensor" in res.problems[0].message


def _figures(res: VerifyResult) -> dict:
    keep = {"compiled", "correct", "stage", "max_abs_error", "max_rel_error", "mismatches", "atol", "rtol", "target",
            "generation", "peak_sbuf_bytes", "peak_psum_bytes", "trace"}
    seeds = [s.model_dump(mode="json", exclude={"kernel_seconds", "reference_seconds"}) for s in res.seeds]
    return {**res.model_dump(mode="json", include=keep), "seeds": seeds, "codes": _codes(res)}


@pytest.mark.parametrize("kernel", ["kernel_new.py", "kernel_classic.py"])
def test_judged_and_in_process_verification_report_the_same_figures(kernel: str) -> None:
    path, task = str(ADD / kernel), str(ADD / "task.py")
    normal = api.verify(path, task, seeds=SEEDS, isolate=False)
    judged = api.verify(path, task, seeds=SEEDS)
    assert judged.correct is True, judged.problems
    assert _figures(judged) == _figures(normal)


def test_a_wrong_kernel_reports_the_same_mismatch_in_both_modes(tmp_path: Path) -> None:
    kernel, task = str(_wrong_kernel(tmp_path, "")), str(ADD / "task.py")
    normal = api.verify(kernel, task, seeds=1, isolate=False)
    judged = api.verify(kernel, task, seeds=1)
    assert judged.correct is False
    assert _figures(judged) == _figures(normal)


@pytest.mark.parametrize("kernel", sorted(EXAMPLES.glob("*/kernel_*.py")),
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_example_verifies_judged(kernel: Path) -> None:
    res = api.verify(str(kernel), str(kernel.parent / "task.py"), seeds=SEEDS)
    assert res.correct is True, res.problems
    assert len(res.seeds) == SEEDS


def test_a_model_form_task_passes_its_parameters(tmp_path: Path) -> None:
    """A Model with parameters reaches a kernel that takes them after its inputs (l1_gelu, parameterless,
    runs with every example above)."""
    task = tmp_path / "task.py"
    task.write_text(
        "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.bias = nn.Parameter(torch.randn(128, 512))\n\n"
        "    def forward(self, x):\n        return x + self.bias\n\n\n"
        "def get_inputs():\n    return [torch.randn(128, 512)]\n\n\ndef get_init_inputs():\n    return []\n")
    kernel = tmp_path / "kernel.py"
    kernel.write_text(
        "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n\n\n@nki.jit\ndef k(x, bias):\n"
        "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
        "    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)\n"
        "    b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)\n"
        "    nisa.dma_copy(dst=a, src=x)\n    nisa.dma_copy(dst=b, src=bias)\n"
        "    nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)\n    nisa.dma_copy(dst=out, src=a)\n"
        "    return out\n")
    normal = api.verify(str(kernel), str(task), seeds=SEEDS, isolate=False)
    judged = api.verify(str(kernel), str(task), seeds=SEEDS)
    assert normal.correct is True, normal.problems
    assert _figures(judged) == _figures(normal)


def test_a_task_error_is_reported_before_any_kernel_code_runs(tmp_path: Path) -> None:
    task = tmp_path / "task.py"
    task.write_text("def get_inputs():\n    raise ValueError('no inputs today')\n\n\ndef reference(a):\n    return a\n")
    res = api.verify(str(ADD / "kernel_new.py"), str(task), seeds=1)
    assert _codes(res) == ["sim_task_error"] and res.correct is False


def test_verification_leaves_no_temporary_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    scratch = tmp_path / "tmp"  # this test's own temp folder: other runs on the machine cannot disturb it
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv("TMPDIR", str(scratch))
    res = api.verify(str(ADD / "kernel_new.py"), str(ADD / "task.py"), seeds=1)
    assert res.correct is True
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(("name", "code"), [("infinite_loop.py", "sim_timeout"), ("exits.py", "sim_worker_crash")])
def test_hostile_kernels_still_end_as_one_clear_problem(name: str, code: str) -> None:
    path = str(ROOT / "tests" / "fixtures" / "hostile" / name)
    res = api.verify(path, path, seeds=1, timeout=6.0 if code == "sim_timeout" else 30.0)
    assert res.correct is False
    assert _codes(res)[:1] == [code], res.problems


def test_a_file_that_is_its_own_task_verifies() -> None:
    path = str(ROOT / "tests" / "fixtures" / "hostile" / "prints_to_stdout.py")
    res = api.verify(path, path, seeds=1)
    assert res.correct is True, res.problems


# --------------------------------------------------------------------- the user's folder as a search path
HELPERS = ("import nki.isa as nisa\nimport nki.language as nl\n\n\n"
           "def tile_add(dst, a, b):\n    nisa.tensor_tensor(dst=dst, data1=a, data2=b, op=nl.add)\n")
ADD_CALL = "nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)"


def _user_folder(tmp_path: Path) -> tuple[Path, Path]:
    """``proj/`` as a user keeps it: kernel.py importing its sibling my_helpers.py, task.py, and the
    bytecode a normal run of the task left in __pycache__; plus ``run/``, where a candidate copy goes."""
    import py_compile

    proj, run = tmp_path / "proj", tmp_path / "run"
    proj.mkdir()
    run.mkdir()
    src = (ADD / "kernel_new.py").read_text()
    assert ADD_CALL in src
    (proj / "my_helpers.py").write_text(HELPERS)
    (proj / "kernel.py").write_text(src.replace("import nki.language as nl\n",
                                                "import nki.language as nl\nfrom my_helpers import tile_add\n")
                                    .replace(ADD_CALL, "tile_add(c_tile, a_tile, b_tile)"))
    (proj / "task.py").write_text((ADD / "task.py").read_text().replace("2112, 1024", "200, 64"))
    py_compile.compile(str(proj / "task.py"), doraise=True)  # what `import task` reads instead of task.py
    return proj, run


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<dir>" for p in folder.rglob("*")}


def _candidate(proj: Path, run: Path, prefix: str = "") -> str:
    text = (proj / "kernel.py").read_text()
    path = run / "kernel.py"
    path.write_text(text.replace("import nki\n", "import nki\n" + prefix, 1))
    return str(path)


def test_a_candidate_copy_imports_sibling_modules_of_the_users_folder(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    proj, run = _user_folder(tmp_path)
    before = _tree(proj)
    task = tmp_path / "tasks" / "task.py"  # a task outside the folder: only the search path reaches my_helpers
    task.parent.mkdir()
    task.write_text((proj / "task.py").read_text())
    kernel = _candidate(proj, run)
    without = api.verify(kernel, str(task), seeds=1)
    assert without.correct is False and "ModuleNotFoundError" in str(without.problems)
    for t in (task, proj / "task.py"):
        res = api.verify(kernel, str(t), seeds=SEEDS, search_path=[str(proj)])
        assert res.correct is True, res.problems
    assert _tree(proj) == before  # read, never written: no new __pycache__ entries


def test_the_task_module_stays_closed_through_the_users_folder(tmp_path: Path) -> None:
    """``import task`` finds proj/task.py through the search path; in the kernel's jail its source reads
    as an empty device (so `import task` finds no module) and its cached bytecode is not there."""
    proj, run = _user_folder(tmp_path)
    before = _tree(proj)
    kernel = _candidate(proj, run, "import task\n_ref = task.reference\n")
    res = api.verify(kernel, str(proj / "task.py"), seeds=1, search_path=[str(proj)])
    assert res.correct is False, res.problems
    assert "No module named 'task'" in res.problems[0].message, res.problems  # not a file there
    assert _tree(proj) == before


def test_a_protected_original_stays_closed(tmp_path: Path) -> None:
    """A kernel that is its own task runs from a copy; the user's original (the real task) is protected."""
    proj, run = _user_folder(tmp_path)
    original = proj / "kernel.py"
    task = run / "_task_kernel.py"  # the tools' copy of a self-task file; here a plain task is enough
    task.write_text((proj / "task.py").read_text())
    import py_compile

    py_compile.compile(str(original), doraise=True)
    for target in (repr(str(original)), f"importlib.util.cache_from_source({str(original)!r})"):
        cheat = ("import importlib.util\ntry:\n"
                 f"    _data = open({target}, 'rb').read()\nexcept OSError:\n    _data = b''\n"
                 "if _data:\n    raise RuntimeError('read the protected original')\n")
        kernel = _candidate(proj, run, cheat)
        res = api.verify(kernel, str(task), seeds=1, search_path=[str(proj)], protect=[str(original)])
        assert res.correct is True, res.problems  # it ran, and found nothing to read
