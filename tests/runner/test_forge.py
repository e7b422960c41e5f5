"""Kernel Forge compatibility (``runner/forge.py``): its clients' bodies, its answers' fields, its routes.

The request bodies are those Kernel Forge's MCP tools, agent and scripts send (``tests/fixtures/forge``,
see its README); answers must carry every field its reward server returns, typed as it returns them.
Unit tests check the mapping onto ``JobRequest`` and the generated task without a runner; the rest
talk HTTP to a real runner on 127.0.0.1 (``runner_factory``, conftest.py) running the simulator backend.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from jsonschema import Draft202012Validator
from nki_agent.runner import forge
from nki_agent.runner.forge_bodies import (
    KERNEL_FILE,
    TASK_FILE,
    ForgeBaselineRequest,
    ForgeCompileRequest,
    ForgeProfileRequest,
    ForgeUnknownOp,
    ForgeVerifyRequest,
    job_request,
    parse,
)
from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.isolation import jail
from nki_agent.toolchain.protocol.jobs import BaselineResult, JobStatus, Latency, ProfileResult
from nki_agent.toolchain.tasks import load_task
from nki_agent.toolchain.judging.verify import draw
from pydantic import ValidationError

FORGE = Path(__file__).resolve().parents[1] / "fixtures" / "forge"
TOKEN = "forge-token-0123456789abcdef"
WAIT_S = 300.0

# Kernel Forge's answer fields and their JSON types (infrastructure/reward_server/*.py)
NUM, OPT_NUM, OPT_INT, OPT_STR = (float,), (float, type(None)), (int, type(None)), (str, type(None))
COMPILE = {"success": (bool,), "neff_path": OPT_STR, "returncode": OPT_INT, "errors": (list,), "warnings": (list,),
           "stderr_tail": (list,), "compile_time_s": NUM}
VERIFY = {"correct": (bool,), "max_abs_error": OPT_NUM, "max_rel_error": OPT_NUM, "mismatched_elements": OPT_INT,
          "total_elements": OPT_INT, "atol": OPT_NUM, "rtol": OPT_NUM, "verify_time_s": NUM, "error": OPT_STR}
PROFILE = {"success": (bool,), "latency_mean_us": OPT_NUM, "latency_median_us": OPT_NUM, "latency_p99_us": OPT_NUM,
           "latency_min_us": OPT_NUM, "latency_max_us": OPT_NUM, "throughput_ops_per_s": OPT_NUM,
           "flops_utilization": (type(None),), "warmup_runs": OPT_INT, "measure_runs": OPT_INT,
           "profile_time_s": NUM, "error": OPT_STR}
BASELINE = dict(PROFILE, backend=(str,), baseline_time_s=NUM)
# what this runner adds on every answer (and on verify / profile / baseline)
EXTRAS = {"job_id": (str,), "core_id": OPT_INT, "nki_version": OPT_STR, "sandbox": OPT_STR}
LATENCY_EXTRAS = {"latency_std_us": OPT_NUM, "latency_kind": (str,), "seeds": (int,)}
FIELDS = {"compile": COMPILE, "verify": dict(VERIFY, seeds=(int,)), "profile": dict(PROFILE, **LATENCY_EXTRAS),
          "baseline": dict(BASELINE, **LATENCY_EXTRAS)}
LATENCY = ("latency_mean_us", "latency_median_us", "latency_p99_us", "latency_min_us", "latency_max_us",
           "latency_std_us", "throughput_ops_per_s")


def _expand(value: Any) -> Any:
    """A fixture value ``"file:NAME"`` is the text of ``NAME`` in the fixture folder (see its README)."""
    if isinstance(value, str) and value.startswith("file:"):
        return (FORGE / value[len("file:"):]).read_text()
    if isinstance(value, list):
        return [_expand(v) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    return value


def body(name: str) -> dict[str, Any]:
    return _expand(json.loads((FORGE / "requests" / name).read_text()))  # type: ignore[no-any-return]


def src(name: str) -> str:
    return (FORGE / name).read_text()


def assert_forge_fields(op: str, answer: dict[str, Any]) -> None:
    """Every Kernel Forge field of ``op`` is present with Kernel Forge's type; so are this runner's extras."""
    for name, types in {**FIELDS[op], **EXTRAS}.items():
        assert name in answer, (op, name, answer)
        value = answer[name]
        ok = any(type(value) is t or (t is float and type(value) is int) for t in types)
        assert ok, (op, name, value, types)
    for key in ("errors", "warnings", "stderr_tail"):
        if key in answer:
            assert all(isinstance(x, str) for x in answer[key])
            assert len(answer[key]) <= (20 if key == "stderr_tail" else 30)
    assert "/job-" not in json.dumps(answer), "the runner's temp paths are not shown"


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def forge_runner(runner_factory: Any) -> Any:
    return runner_factory(workers=2)


@pytest.fixture
def http(forge_runner: Any) -> Any:
    with httpx.Client(base_url=forge_runner.url, timeout=WAIT_S) as client:
        yield client


# ---------------------------------------------------------------- request mapping (no runner)


def test_client_bodies_parse_into_kernel_forge_requests_with_its_defaults():
    compile_ = parse(body("mcp_compile.json"))
    assert isinstance(compile_, ForgeCompileRequest)
    assert [(s.shape, s.dtype) for s in compile_.input_specs] == [([128, 256], "float32")]  # its default
    verify = parse(body("single_shot_verify.json"))
    assert isinstance(verify, ForgeVerifyRequest)
    assert (verify.kernel_name, verify.atol, verify.rtol) == ("nki_kernel", 1e-3, 1e-3)
    profile = parse(body("mcp_profile.json"))
    assert isinstance(profile, ForgeProfileRequest) and (profile.warmup_runs, profile.measure_runs) == (5, 20)
    defaults = parse({"op": "profile", "kernel_source": src("scale.py"), "input_specs": [{"shape": [1], "dtype": "int8"}]})
    assert isinstance(defaults, ForgeProfileRequest) and (defaults.warmup_runs, defaults.measure_runs) == (5, 50)
    assert isinstance(parse(body("sweep_baseline.json")), ForgeBaselineRequest)
    assert parse(body("agent_skill.json")) == ForgeUnknownOp(error=parse(body("agent_skill.json")).error)  # type: ignore[union-attr]
    assert parse({"op": "nope"}).error == "unknown op: nope"  # type: ignore[union-attr]
    assert parse({}).error == "unknown op: None"  # type: ignore[union-attr]


@pytest.mark.parametrize("name, op, warmup, iterations, timeout", [
    ("mcp_compile.json", "compile", 5, 50, 300.0), ("mcp_verify.json", "verify", 5, 50, 600.0),
    ("mcp_profile.json", "profile", 5, 20, 900.0), ("sweep_baseline.json", "baseline", 5, 50, 900.0)])
def test_requests_map_onto_typed_jobs(name, op, warmup, iterations, timeout):
    parsed = parse(body(name))
    assert not isinstance(parsed, ForgeUnknownOp)
    job = job_request(parsed)
    assert (job.op, job.warmup, job.iterations, job.timeout_s) == (op, warmup, iterations, timeout)
    assert [f.name for f in job.files()] == [KERNEL_FILE, TASK_FILE]  # never named after kernel_name
    assert job.kernel_name == "nki_kernel"
    if op in ("compile", "verify", "profile"):
        assert job.kernel.text == body(name)["kernel_source"]
    assert job.task is not None and "KERNEL = 'nki_kernel'" in job.task.text
    if op == "verify":
        assert job.seeds >= 3 and "TOLERANCE = {\"atol\": 0.001, \"rtol\": 0.001}" in job.task.text


BAD = [
    {"kernel_source": 123},
    {"kernel_source": "x" * (256 * 1024 + 1)},
    {"kernel_source": "def other(x):\n    return x\n"},  # does not define nki_kernel
    {"kernel_name": "has space"}, {"kernel_name": "1leading"}, {"kernel_name": "bad-hyphen"},
    {"kernel_name": "a" * 65}, {"kernel_name": ""}, {"kernel_name": "nki_kernel\n"},
    {"input_specs": "notalist"}, {"input_specs": []}, {"input_specs": [{"shape": [128, 256]}]},
    {"input_specs": [{"dtype": "float32"}]}, {"input_specs": [{"shape": [0, 256], "dtype": "float32"}]},
    {"input_specs": [{"shape": [128, -1], "dtype": "float32"}]},
    {"input_specs": [{"shape": [128, 2.0], "dtype": "float32"}]},
    {"input_specs": [{"shape": [128, 256], "dtype": "float64"}]},
    {"input_specs": [{"shape": [128, 256], "dtype": "'; rm -rf /"}]},
    {"input_specs": [{"shape": [1 << 20, 1 << 20], "dtype": "float32"}]},  # far beyond the jail's memory
    {"reference_source": "x" * (256 * 1024 + 1)}, {"reference_source": "def other(x):\n    return x\n"},
    {"atol": "loose"}, {"rtol": -1.0},
]
TIMED_BAD = [{"warmup_runs": -1}, {"warmup_runs": 101}, {"measure_runs": 0}, {"measure_runs": 1001},
             {"warmup_runs": "five"}]


@pytest.mark.parametrize("change", BAD + TIMED_BAD)
def test_malformed_bodies_of_known_ops_are_refused(change):
    base = body("mcp_verify.json") if not set(change) & {"warmup_runs", "measure_runs"} else body("agent_profile.json")
    with pytest.raises(ValidationError):
        parse(dict(base, **change))


@pytest.mark.parametrize("source, defined", [
    ("import neuronxcc.nki as nki\n\n@nki.jit\ndef nki_kernel(x):\n    return x\n", True),
    ("def _impl(x):\n    return x\n\nnki_kernel = _impl\n", True),
    ("try:\n    from helpers import nki_kernel\nexcept ImportError:\n    pass\n", True),
    ("from helpers import *\n", True),
    ("def nki_kernel(x:\n", True),  # does not parse: the job reports the syntax error at its line
    ("", False), ("def other(x):\n    def nki_kernel(y):\n        return y\n    return x\n", False),
    ("# nki_kernel\nNAME = 'nki_kernel'\n", False)])
def test_kernel_source_must_define_the_kernel(source, defined):
    request = {"op": "compile", "kernel_source": source}
    if defined:
        assert isinstance(parse(request), ForgeCompileRequest)
    else:
        with pytest.raises(ValidationError, match="defines no 'nki_kernel'"):
            parse(request)


def _task(tmp_path: Path, request: dict[str, Any]) -> Any:
    parsed = parse(request)
    assert not isinstance(parsed, ForgeUnknownOp)
    job = job_request(parsed)
    assert job.task is not None
    path = tmp_path / job.task.name
    path.write_text(job.task.text)
    return load_task(str(path))


def test_bf16_inputs_are_drawn_as_bf16_and_reach_the_reference_as_torch_bf16(tmp_path):
    reference = ("import torch\n\ndef reference(x, n):\n    assert x.dtype == torch.bfloat16, x.dtype\n"
                 "    assert n.dtype == torch.int8, n.dtype\n    return x * 2.0\n")
    task = _task(tmp_path, {"op": "verify", "kernel_source": src("scale.py"), "reference_source": reference,
                            "input_specs": [{"shape": [128, 64], "dtype": "bfloat16"},
                                            {"shape": [4], "dtype": "int8"}], "atol": 0.5})
    assert task.tolerance == {"atol": 0.5, "rtol": 1e-3} and task.kernel_name == "nki_kernel"
    inputs, expected, _ = draw(task, 0)
    assert inputs[0].dtype == dtypes.bfloat16 and inputs[0].shape == (128, 64)  # bf16, not float32
    assert inputs[1].dtype == np.int8 and -128 <= int(inputs[1].min()) and int(inputs[1].max()) <= 127
    assert expected[0].dtype == dtypes.bfloat16
    np.testing.assert_array_equal(expected[0].astype(np.float32), inputs[0].astype(np.float32) * 2)
    again, _, _ = draw(task, 0)
    other, _, _ = draw(task, 1)
    assert np.array_equal(again[0].view(np.int16), inputs[0].view(np.int16))  # reproducible per seed
    assert not np.array_equal(other[0].view(np.int16), inputs[0].view(np.int16))  # different across seeds


def test_the_reference_lives_in_its_own_namespace(tmp_path):
    reference = ("import torch\nTOLERANCE = {'atol': 100.0}\nKERNEL = 'evil'\nGRID = (4,)\n\n"
                 "def get_inputs():\n    raise AssertionError('not the task\\'s')\n\n"
                 "class Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                 "        self.w = torch.nn.Parameter(torch.ones(3))\n"
                 "    def forward(self, x):\n        return x + 1\n\n"
                 "def reference(x):\n    return Model()(x)\n")
    task = _task(tmp_path, {"op": "verify", "kernel_source": src("scale.py"), "reference_source": reference,
                            "input_specs": [{"shape": [8, 3], "dtype": "float32"}]})
    assert task.tolerance == {"atol": 1e-3, "rtol": 1e-3} and task.kernel_name == "nki_kernel" and task.grid == ()
    inputs, expected, _ = draw(task, 0)
    np.testing.assert_allclose(expected[0], inputs[0] + 1)
    assert task.model_parameters() == []  # the reference's parameters are never passed to the kernel


def test_a_model_only_reference_is_instantiated_as_kernel_forge_does(tmp_path):
    reference = ("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                 "        return torch.relu(x)\n")
    task = _task(tmp_path, {"op": "baseline", "reference_source": reference,
                            "input_specs": [{"shape": [16, 16], "dtype": "float16"}]})
    inputs, expected, _ = draw(task, 2)
    assert inputs[0].dtype == np.float16
    np.testing.assert_array_equal(expected[0], np.maximum(inputs[0], 0))


def _done(result: Any) -> JobStatus:
    return JobStatus(id="j" * 32, op=result.op, state="done", submitted_at=1.0, started_at=2.0, finished_at=3.5,
                     result=result, core_id=1)


def test_a_profile_without_reference_accepts_any_finite_output_of_the_simulated_shapes(tmp_path):
    parsed = parse(body("mcp_profile.json"))
    assert not isinstance(parsed, ForgeUnknownOp)
    assert job_request(parsed, op="simulate").op == "simulate"
    job = job_request(parsed, outputs=[[128, 256], [4]])
    assert job.task is not None
    path = tmp_path / job.task.name
    path.write_text(job.task.text)
    task = load_task(str(path))
    _, expected, _ = draw(task, 0)
    assert [e.shape for e in expected] == [(128, 256), (4,)] and not any(e.any() for e in expected)
    assert task.tolerance["atol"] >= 1e300  # any finite output passes, NaN (never written) does not


def test_measured_latency_maps_to_kernel_forge_fields_with_a_true_mean():
    lat = Latency(kind="measured", source="nki.benchmark", p50_us=10.0, p99_us=30.0, min_us=9.0, max_us=31.0,
                  mean_us=12.5, std_us=4.0, iterations=37, warmup=5, core_id=1)
    profile = forge.answer(ForgeProfileRequest.model_validate(body("agent_profile.json")),
                           _done(ProfileResult(compiled=True, correct=True, latency=lat, sandbox="bwrap")), "0.7.0")
    out = profile.model_dump(mode="json")
    assert_forge_fields("profile", dict(out, job_id="j" * 32))
    assert out["success"] is True and out["error"] is None and out["latency_kind"] == "measured"
    assert (out["latency_mean_us"], out["latency_median_us"], out["latency_std_us"]) == (12.5, 10.0, 4.0)
    assert out["throughput_ops_per_s"] == pytest.approx(1e6 / 12.5)
    assert (out["measure_runs"], out["warmup_runs"]) == (37, 5)  # what ran: it stopped once stable
    assert (out["core_id"], out["nki_version"], out["sandbox"], out["correct"]) == (1, "0.7.0", "bwrap", None)
    baseline = forge.answer(ForgeBaselineRequest.model_validate(body("sweep_baseline.json")),
                            _done(BaselineResult(label="cpu", latency=lat))).model_dump(mode="json")
    assert_forge_fields("baseline", baseline)
    assert baseline["backend"] == "cpu" and baseline["success"] is True
    assert baseline["baseline_time_s"] == baseline["profile_time_s"]
    unmeasured = forge.answer(ForgeProfileRequest.model_validate(body("mcp_profile.json")),
                              _done(ProfileResult(compiled=True, correct=True))).model_dump(mode="json")
    assert all(unmeasured[k] is None for k in LATENCY) and unmeasured["success"] is False
    assert (unmeasured["warmup_runs"], unmeasured["measure_runs"]) == (5, 20)  # as asked, none ran


def test_a_job_without_result_answers_in_the_ops_shape():
    failed = JobStatus(id="f" * 32, op="verify", state="failed", submitted_at=1.0, error="internal error: boom")
    verify = forge.answer(ForgeVerifyRequest.model_validate(body("mcp_verify.json")), failed).model_dump(mode="json")
    assert_forge_fields("verify", verify)
    assert verify["correct"] is False and verify["error"] == "internal error: boom"
    compile_ = forge.answer(ForgeCompileRequest.model_validate(body("mcp_compile.json")),
                            failed.model_copy(update={"op": "compile"})).model_dump(mode="json")
    assert_forge_fields("compile", compile_)
    assert compile_["success"] is False and compile_["returncode"] is None
    assert compile_["errors"] == ["error: internal error: boom"]
    waiting = failed.model_copy(update={"state": "running", "error": None})
    late = forge.answer(ForgeVerifyRequest.model_validate(body("mcp_verify.json")), waiting)
    assert "GET /v1/jobs/" + "f" * 32 in (late.model_dump()["error"] or "")


# ---------------------------------------------------------------- over HTTP, on a real runner


def test_compile_answers_with_kernel_forge_fields(http):
    ok = http.post("/reward", json=body("mcp_compile.json"))
    assert ok.status_code == 200, ok.text
    answer = ok.json()
    assert_forge_fields("compile", answer)
    assert answer["success"] is True and answer["returncode"] == 0 and answer["errors"] == []
    assert answer["neff_path"] is None  # the simulator makes no NEFF
    shaped = http.post("/reward", json=body("agent_compile.json")).json()
    assert_forge_fields("compile", shaped)
    assert shaped["success"] is True
    bad = http.post("/reward", json=body("single_shot_compile.json")).json()
    assert_forge_fields("compile", bad)
    assert bad["success"] is False and bad["returncode"] == 1
    assert any("kernel_source:" in e and "out-of-bound" in e.lower() for e in bad["errors"]), bad["errors"]


def test_verify_correct_and_wrong_kernels(http):
    good = http.post("/reward", json=body("mcp_verify.json")).json()
    assert_forge_fields("verify", good)
    assert good["correct"] is True and good["error"] is None
    assert good["mismatched_elements"] == 0 and good["max_abs_error"] == 0.0
    assert good["seeds"] >= 4  # three visible seeds and a hidden one
    assert good["total_elements"] == good["seeds"] * 256 * 128
    assert (good["atol"], good["rtol"]) == (1e-3, 1e-3)
    assert good["sandbox"] == jail.status().label

    wrong = http.post("/reward", json=body("single_shot_verify.json")).json()
    assert_forge_fields("verify", wrong)
    assert wrong["correct"] is False
    assert wrong["error"] is None  # it ran: Kernel Forge's agent reads a null error as "compiled"
    assert wrong["mismatched_elements"] > 0 and wrong["max_abs_error"] > 1e-3

    broken = http.post("/reward", json=dict(body("mcp_verify.json"), kernel_source=src("broken.py"),
                                            input_specs=[{"shape": [128, 64], "dtype": "float32"}],
                                            reference_source=src("scale_reference.py"))).json()
    assert_forge_fields("verify", broken)
    assert broken["correct"] is False and "kernel_source:" in broken["error"]
    assert broken["max_abs_error"] is None and broken["total_elements"] is None


def test_verify_with_bf16_inputs_end_to_end(http):
    reference = ("import torch\n\ndef reference(x):\n    if x.dtype != torch.bfloat16:\n"
                 "        raise TypeError(f'got {x.dtype}')\n    return x * 2.0\n")
    answer = http.post("/reward", json={"op": "verify", "kernel_source": src("scale.py"), "reference_source": reference,
                                        "input_specs": [{"shape": [128, 64], "dtype": "bfloat16"}]}).json()
    assert_forge_fields("verify", answer)
    assert answer["correct"] is True, answer
    float32 = http.post("/reward", json={"op": "verify", "kernel_source": src("scale.py"),
                                         "reference_source": reference,
                                         "input_specs": [{"shape": [128, 64], "dtype": "float32"}]}).json()
    assert float32["correct"] is False and "reference_source" in float32["error"] and "float32" in float32["error"]


def test_profile_never_invents_latency(http):
    for name in ("mcp_profile.json", "agent_profile.json"):
        answer = http.post("/reward", json=body(name)).json()
        assert_forge_fields("profile", answer)
        sent = body(name)
        if answer["latency_kind"] == "not measured":  # the simulator backend has no timing
            assert all(answer[k] is None for k in LATENCY), answer
            assert answer["success"] is False and "not measured" in answer["error"]
            assert (answer["warmup_runs"], answer["measure_runs"]) == (sent["warmup_runs"], sent["measure_runs"])
        else:  # measured on a device, or the cost model's estimate (one figure: no mean of runs)
            figure = answer["latency_mean_us"] if answer["latency_kind"] == "measured" else answer["latency_median_us"]
            assert answer["success"] is True and figure > 0
        assert answer["flops_utilization"] is None
        assert answer["correct"] is None and answer["seeds"] == 0  # no reference_source: nothing judged
        # the backends time only kernels judged correct: judged against "any finite output of its shapes"
        job = http.get(f"/v1/jobs/{answer['job_id']}").json()
        assert job["op"] == "profile" and job["result"]["correct"] is True, job
    broken = http.post("/reward", json=dict(body("mcp_profile.json"), kernel_source=src("broken.py"))).json()
    assert_forge_fields("profile", broken)
    assert broken["success"] is False and "kernel_source:" in broken["error"]
    judged = http.post("/reward", json=dict(body("agent_profile.json"), reference_source=src("scale_reference.py")))
    assert judged.json()["correct"] is True and judged.json()["seeds"] >= 4  # the extension: judged as verify


def test_baseline_answers_with_kernel_forge_fields(http):
    answer = http.post("/reward", json=body("sweep_baseline.json")).json()
    assert_forge_fields("baseline", answer)
    if answer["latency_kind"] == "not measured":
        assert all(answer[k] is None for k in LATENCY) and answer["success"] is False and answer["error"]
    else:
        assert answer["success"] is True and answer["latency_mean_us"] > 0 and answer["backend"]


def test_batch_of_three_answers_in_order(http):
    answer = http.post("/reward/batch", json=body("mcp_batch.json"))
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert len(results) == 3
    assert_forge_fields("verify", results[0])
    assert_forge_fields("verify", results[1])
    assert_forge_fields("compile", results[2])
    assert results[0]["correct"] is True and results[1]["correct"] is False and results[1]["error"] is None
    assert results[2]["success"] is False
    assert len({r["job_id"] for r in results}) == 3
    mixed = http.post("/reward/batch", json={"items": [body("agent_skill.json"), body("mcp_compile.json")]}).json()
    assert "unknown op: skill" in mixed["results"][0]["error"] and mixed["results"][1]["success"] is True
    assert http.post("/reward/batch", json={"items": []}).json() == {"results": []}


def test_a_batch_beyond_the_tokens_share_of_the_queue_still_runs_in_order(runner_factory):
    live = runner_factory(workers=1, queue_per_token=1, cache=False)
    items = [body("mcp_compile.json"), body("agent_compile.json"), body("single_shot_compile.json")]
    with httpx.Client(base_url=live.url, timeout=WAIT_S) as http:
        results = http.post("/reward/batch", json={"items": items}).json()["results"]
    assert [r["success"] for r in results] == [True, True, False]


def test_batch_of_65_and_other_malformed_batches_are_422(http, forge_runner):
    for bad in ({"items": [body("agent_skill.json")] * 65}, {"items": "notalist"}, {}, [1, 2]):
        resp = http.post("/reward/batch", json=bad)
        assert resp.status_code == 422, (bad, resp.text)
        assert resp.json()["error"] == "invalid request" and resp.json()["detail"]
    before = forge_runner.service.manager.load()
    mixed = http.post("/reward/batch", json={"items": [body("mcp_compile.json"), {"op": "verify"}]})
    assert mixed.status_code == 422
    assert mixed.json()["detail"][0]["loc"][:3] == ["body", "items", 1]
    assert forge_runner.service.manager.load() == before  # checked whole: nothing was submitted


def test_unknown_op_is_200_with_error_and_malformed_known_op_is_422(http):
    for payload, expect in (({"op": "does-not-exist"}, "unknown op: does-not-exist"), ({}, "unknown op: None"),
                            (body("agent_skill.json"), "unknown op: skill")):
        resp = http.post("/reward", json=payload)
        assert resp.status_code == 200
        assert list(resp.json()) == ["error"] and resp.json()["error"].startswith(expect)
    for change in (BAD[1], BAD[3], BAD[12], TIMED_BAD[0]):
        resp = http.post("/reward", json=dict(body("agent_profile.json"), **change))
        assert resp.status_code == 422, (change, resp.text)
        assert resp.json()["error"] == "invalid request"
    assert http.post("/reward", content=b"[1, 2]", headers={"content-type": "application/json"}).status_code == 422
    for raw in (b"not json", b"", b'{"op": "verify"', b'{"op": "\xff"}', b'{"n": ' + b"9" * 5000 + b"}"):
        resp = http.post("/reward", content=raw, headers={"content-type": "application/json"})
        assert resp.status_code == 400, (raw[:40], resp.text)
        assert resp.json()["detail"][0]["msg"] == "the body is not JSON"


def test_auth_matrix(runner_factory):
    live = runner_factory(token=TOKEN)
    routes = [("POST", "/reward", body("agent_skill.json")), ("POST", "/reward/batch", {"items": []}),
              ("GET", "/health/deep", None)]
    with httpx.Client(base_url=live.url, timeout=WAIT_S) as http:
        assert http.get("/health").json() == {"status": "ok"}  # public, like /healthz (readiness gates)
        for method, path, payload in routes:
            for headers in ({}, auth("wrong-token-wrong-token-wrong"), auth(TOKEN + "x"), {"Authorization": TOKEN}):
                resp = http.request(method, path, json=payload, headers=headers)
                assert resp.status_code == 401, (method, path, headers)
                assert resp.headers.get("www-authenticate") == "Bearer" and TOKEN not in resp.text
            resp = http.request(method, path, json=payload, headers=auth())
            assert resp.status_code in ((200, 503) if path == "/health/deep" else (200,)), (path, resp.text)


def test_every_batch_item_counts_against_the_rate_limit(runner_factory):
    live = runner_factory(rate_per_minute=5)
    with httpx.Client(base_url=live.url, timeout=WAIT_S) as http:
        assert http.post("/reward/batch", json={"items": [{"op": "x"}] * 3}).status_code == 200
        refused = http.post("/reward/batch", json={"items": [{"op": "x"}] * 3})
        assert refused.status_code == 429 and refused.headers.get("retry-after")  # 3 more than the 2 left
        assert [http.post("/reward", json={"op": "x"}).status_code for _ in range(3)] == [200, 200, 429]


def test_deep_health_runs_a_job_in_the_jail(http, monkeypatch):
    resp = http.get("/health/deep")
    answer = resp.json()
    if jail.status().available:
        assert resp.status_code == 200, answer
        assert answer["status"] == "ok" and answer["sandbox"] == "bwrap" and answer["job_id"]
    else:
        assert resp.status_code == 503 and answer["status"] == "degraded" and "jail" in answer["error"]
    assert http.get("/health/deep").json()["job_id"] != answer["job_id"]  # a fresh job, never the cache
    monkeypatch.setattr(forge, "_HEALTH_TASK", forge._HEALTH_TASK.replace("x * 2.0", "x * 3.0"))
    broken = http.get("/health/deep")
    assert broken.status_code == 503 and broken.json()["status"] == "degraded" and broken.json()["error"]


def test_schema_has_the_kernel_forge_bodies_and_answers_validate(http):
    spec = http.get("/v1/openapi.json").json()
    for route in ("/reward", "/reward/batch", "/health", "/health/deep"):
        assert route in spec["paths"], route
    schemas = spec["components"]["schemas"]
    for model in ("ForgeCompileRequest", "ForgeVerifyRequest", "ForgeProfileRequest", "ForgeBaselineRequest",
                  "ForgeBatchRequest", "ForgeInputSpec", "ForgeCompileAnswer", "ForgeVerifyAnswer",
                  "ForgeProfileAnswer", "ForgeBaselineAnswer", "ForgeUnknownOp", "ForgeBatchAnswer"):
        assert model in schemas, model
    request_schema = spec["paths"]["/reward"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert len(request_schema["oneOf"]) == 4

    def validator(name: str) -> Draft202012Validator:
        return Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": spec["components"]})

    for name in ("mcp_compile.json", "mcp_verify.json", "mcp_profile.json", "sweep_baseline.json"):
        model = {"compile": "ForgeCompileRequest", "verify": "ForgeVerifyRequest", "profile": "ForgeProfileRequest",
                 "baseline": "ForgeBaselineRequest"}[body(name)["op"]]
        validator(model).validate(body(name))
    batch = http.post("/reward/batch", json={"items": [body("mcp_compile.json"), body("agent_skill.json")]}).json()
    validator("ForgeBatchAnswer").validate(batch)
    validator("ForgeHealth").validate(http.get("/health").json())


def test_messages_hide_the_runners_paths(http, forge_runner):
    answer = http.post("/reward", json={"op": "compile", "kernel_source": "@nki.jit\ndef nki_kernel(x:\n"}).json()
    assert answer["success"] is False and answer["errors"]
    text = json.dumps(answer)
    assert forge_runner.config.state_dir not in text and os.sep + "job-" not in text
    assert "kernel_source:2:" in text
    ref = http.post("/reward", json=dict(body("mcp_verify.json"), reference_source="def reference(a, b):\n    (\n"))
    assert ref.json()["error"].startswith("error: reference_source:2: "), ref.json()


@pytest.mark.skipif(not jail.status().available, reason="the fake device is bound into the jail")
def test_on_the_neuron_backend_a_profile_without_reference_is_timed(runner_factory, tmp_path, monkeypatch):
    from neuron_helpers import fake_device

    fake_device(tmp_path, monkeypatch, devices=1)  # tests/fixtures/fake_neuron: the recorded trn1 figures
    live = runner_factory(backend="neuron")
    with httpx.Client(base_url=live.url, timeout=WAIT_S) as http:
        answer = http.post("/reward", json=body("agent_profile.json")).json()
        verify = http.post("/reward", json=body("mcp_verify.json")).json()
    assert_forge_fields("profile", answer)
    assert answer["success"] is True and answer["error"] is None, answer
    assert answer["latency_kind"] == "measured" and answer["correct"] is None
    assert answer["latency_median_us"] > 0 and answer["latency_std_us"] is not None
    assert answer["latency_mean_us"] != answer["latency_median_us"]  # a true mean, not the p50
    assert answer["throughput_ops_per_s"] == pytest.approx(1e6 / answer["latency_mean_us"])
    assert isinstance(answer["core_id"], int) and answer["nki_version"] and answer["sandbox"] == "bwrap"
    assert 1 <= answer["measure_runs"] <= 50 and answer["warmup_runs"] == 5
    assert_forge_fields("verify", verify)
    assert verify["correct"] is True and verify["seeds"] >= 4
