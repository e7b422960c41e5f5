"""The real-compiler path, exercised with a fake SDK (tests/fixtures/fake_sdk) that replays recorded outputs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from nki_agent.diagnostics import compiler

FAKE = Path(__file__).resolve().parents[1] / "fixtures" / "fake_sdk"
KERNELS = FAKE / "kernels"
LOGS = FAKE.parent / "logs"


@pytest.fixture
def sdk_env() -> dict[str, str]:
    return dict(os.environ, PATH=f"{FAKE / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
                PYTHONPATH=str(FAKE / "site"))


@pytest.fixture
def no_sdk_env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, PATH=str(tmp_path), PYTHONPATH="")


def test_detect(sdk_env: dict[str, str], no_sdk_env: dict[str, str]) -> None:
    sdk = compiler.detect(sdk_env)
    assert sdk.neuronxcc == str(FAKE / "site") and sdk.nki == str(FAKE / "site")
    assert sdk.neuronx_cc == str(FAKE / "bin" / "neuronx-cc")
    assert compiler.detect(no_sdk_env) == compiler.Sdk()


def test_classic_simulate_kernel_traceback(sdk_env: dict[str, str]) -> None:
    kernel = str(KERNELS / "classic_vector_add.py")
    res = compiler.compile_kernel(kernel, str(KERNELS / "vector_add_task.py"), env=sdk_env, timeout=120)
    assert res.backend == "neuronxcc.nki" and not res.ok and res.returncode == 1
    (d,) = res.diagnostics
    assert (d.code, d.path, d.line, d.column) == ("nki_tile_rank", kernel, 9, 5)
    assert "Insufficient rank" in d.message


def test_classic_baremetal_backend_error(sdk_env: dict[str, str]) -> None:
    kernel = str(KERNELS / "classic_vector_add.py")
    res = compiler.compile_kernel(kernel, str(KERNELS / "vector_add_task.py"), mode="baremetal", env=sdk_env,
                                  timeout=120)
    assert res.backend == "neuronxcc.nki"
    (d,) = res.diagnostics  # the NCC line wins over the "Compilation failed" envelope
    assert (d.code, d.path, d.line) == ("NCC_IXCG856", kernel, 6)  # the kernel def
    assert d.not_your_bug


def test_classic_baremetal_other_recorded_output(sdk_env: dict[str, str]) -> None:
    kernel = str(KERNELS / "classic_vector_add.py")
    env = dict(sdk_env, FAKE_NEURONX_CC_LOG=str(LOGS / "case05_ten404_single_store.txt"))
    res = compiler.compile_kernel(kernel, str(KERNELS / "vector_add_task.py"), mode="baremetal", env=env, timeout=120)
    assert [d.code for d in res.diagnostics] == ["TEN404"]
    assert "+=" in res.diagnostics[0].message  # the known-cause hint


def test_new_nki_simulate_error(sdk_env: dict[str, str]) -> None:
    kernel = str(KERNELS / "new_copy.py")
    res = compiler.compile_kernel(kernel, str(KERNELS / "new_copy_task.py"), env=sdk_env, timeout=120)
    assert res.backend == "nki"
    (d,) = res.diagnostics
    assert (d.code, d.path, d.line) == ("sim_shape_mismatch", kernel, 10)


def test_neuronx_cc_on_a_model_file(sdk_env: dict[str, str], tmp_path: Path) -> None:
    model = tmp_path / "model.hlo_module.pb"
    model.write_bytes(b"\x08\x01")
    res = compiler.compile_kernel(str(model), env=sdk_env, timeout=60)
    assert res.backend == "neuronx-cc" and res.returncode == 70
    assert res.command[:2] == [str(FAKE / "bin" / "neuronx-cc"), "compile"]
    (d,) = res.diagnostics
    assert (d.code, d.path) == ("NCC_IXCG856", str(model))


def test_unrecognised_failure_is_still_an_error(sdk_env: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "garbage.txt"
    log.write_text("segmentation fault somewhere\n")
    model = tmp_path / "m.pb"
    model.write_bytes(b"x")
    res = compiler.compile_kernel(str(model), env=dict(sdk_env, FAKE_NEURONX_CC_LOG=str(log)), timeout=60)
    assert [d.code for d in res.diagnostics] == ["log_compile_failed"] and not res.ok


def test_success_is_ok(sdk_env: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "ok.txt"
    log.write_text("Compiler status PASS\n")
    model = tmp_path / "m.pb"
    model.write_bytes(b"x")
    res = compiler.compile_kernel(str(model), env=dict(sdk_env, FAKE_NEURONX_CC_LOG=str(log),
                                                       FAKE_NEURONX_CC_STATUS="0"), timeout=60)
    assert res.ok and res.diagnostics == [] and res.backend == "neuronx-cc"


def test_embedded_when_no_sdk(no_sdk_env: dict[str, str]) -> None:
    kernel = str(KERNELS / "classic_vector_add.py")
    res = compiler.compile_kernel(kernel, str(KERNELS / "vector_add_task.py"), env=no_sdk_env, timeout=120)
    assert res.backend == compiler.EMBEDDED and not res.ok
    assert res.diagnostics and all(d.path == kernel for d in res.diagnostics)
    assert res.diagnostics[0].line == 9
    res = compiler.compile_kernel(kernel, env=no_sdk_env)
    assert res.backend == compiler.EMBEDDED and res.ok and "static check" in res.detail
    assert res.as_dict()["backend"] == "embedded"


def test_prefer_embedded_ignores_the_sdk(sdk_env: dict[str, str]) -> None:
    res = compiler.compile_kernel(str(KERNELS / "classic_vector_add.py"), prefer="embedded", env=sdk_env)
    assert res.backend == compiler.EMBEDDED


def test_timeout(sdk_env: dict[str, str], tmp_path: Path) -> None:
    task = tmp_path / "slow_task.py"
    task.write_text("import time\n\ndef get_inputs():\n    time.sleep(30)\n\ndef reference(*a):\n    return a\n")
    kernel = str(KERNELS / "classic_vector_add.py")
    res = compiler.compile_kernel(kernel, str(task), env=sdk_env, timeout=2)
    assert res.backend == "neuronxcc.nki" and res.returncode is None
    assert [d.code for d in res.diagnostics] == ["sim_timeout"]
