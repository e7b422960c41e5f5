"""The runner's HTTP contract: the generated schema, auth on every route, limits, cancel, cache, events.

Jobs here run on ``GateBackend`` (held until released) so queue and cancel states are exact; the real
simulator backend is exercised by test_runner_faults.py and the client tests.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from jsonschema import Draft202012Validator
from nki_agent.runner import app as app_module
from nki_agent.runner.config import ConfigError, RunnerConfig
from runner_fakes import GateBackend, auth, request, running

TOKEN = "s3cret-token-for-tests-0123456789"


def _validator(spec: dict, name: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": spec["components"]})


def _response_schema(spec: dict, path: str, method: str, status: str) -> str:
    content = spec["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]
    return str(content["$ref"]).rsplit("/", 1)[-1]


def test_schema_is_generated_from_the_models(tmp_path):
    with running(tmp_path, GateBackend(), token=TOKEN) as (_, client):
        spec = client.get("/v1/openapi.json", headers=auth(TOKEN)).json()
    paths = spec["paths"]
    for route in ("/healthz", "/v1/capabilities", "/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/events",
                  "/v1/verify"):
        assert route in paths, route
    body = paths["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["$ref"].endswith("/BundledJobRequest")  # JobRequest + the task's own bundle (task_modules)
    assert _response_schema(spec, "/v1/jobs", "post", "202") == "JobStatus"
    assert _response_schema(spec, "/v1/capabilities", "get", "200") == "Capabilities"
    for model in ("VerifyResult", "ProfileResult", "SimulateResult", "CompileResult", "BaselineResult", "Latency",
                  "SeedFigures", "Mismatch", "ProblemInfo"):
        assert model in spec["components"]["schemas"], model


def test_answers_validate_against_the_schema(tmp_path):
    gate = GateBackend()
    gate.gate.set()
    with running(tmp_path, gate) as (_, client):
        spec = client.get("/v1/openapi.json").json()
        answers = {
            ("/healthz", "get", "200"): client.get("/healthz"),
            ("/v1/capabilities", "get", "200"): client.get("/v1/capabilities"),
        }
        posted = client.post("/v1/jobs?wait=60", json=request("n-1"))
        answers[("/v1/jobs", "post", "202")] = posted
        job = posted.json()["id"]
        answers[("/v1/jobs/{job_id}", "get", "200")] = client.get(f"/v1/jobs/{job}")
        answers[("/v1/jobs/{job_id}", "delete", "200")] = client.delete(f"/v1/jobs/{job}")
        answers[("/v1/verify", "post", "200")] = client.post("/v1/verify", json=request("n-2"))
        for (path, method, status), resp in answers.items():
            assert str(resp.status_code) == status, (path, resp.text)
            _validator(spec, _response_schema(spec, path, method, status)).validate(resp.json())
        bad = client.post("/v1/jobs", json={"op": "verify"})
        assert bad.status_code == 422
        _validator(spec, "ErrorBody").validate(bad.json()) if "ErrorBody" in spec["components"]["schemas"] else None
        assert bad.json()["error"] == "invalid request"


def _routes(app) -> list[tuple[str, str]]:
    out = []
    for r in app.routes:
        for method in sorted(getattr(r, "methods", None) or ()):
            if method != "HEAD":
                out.append((method, re.sub(r"\{[^}]+\}", "0" * 32, r.path)))
    return out


@pytest.mark.parametrize("presented", [None, "wrong-token-wrong-token-wrong", TOKEN[:-1], TOKEN + "x", "Basic abc"])
def test_every_route_but_healthz_needs_the_token(tmp_path, presented):
    with running(tmp_path, GateBackend(), token=TOKEN) as (runner, client):
        routes = _routes(runner.app)
        assert len(routes) >= 7
        for method, path in routes:
            if presented is None:
                headers = {}
            elif presented.startswith("Basic"):
                headers = {"Authorization": presented}
            else:
                headers = auth(presented)
            resp = client.request(method, path, headers=headers, json=request())
            if path in app_module.PUBLIC_ROUTES:
                assert resp.status_code == 200, (method, path)
            else:
                assert resp.status_code == 401, (method, path, resp.status_code, resp.text)
                assert resp.headers.get("www-authenticate") == "Bearer"
                assert TOKEN not in resp.text


def test_right_token_is_accepted_and_jobs_are_private_to_their_token(tmp_path):
    gate = GateBackend()
    gate.gate.set()
    other = "another-token-of-another-user"
    config_tokens = TOKEN
    with running(tmp_path, gate, token=config_tokens) as (runner, client):
        posted = client.post("/v1/jobs?wait=60", json=request("mine"), headers=auth(TOKEN))
        assert posted.status_code == 202
        job = posted.json()["id"]
        assert client.get(f"/v1/jobs/{job}", headers=auth(TOKEN)).json()["nonce"] == "mine"
        # a job id does not leak across tokens: same 404 as an unknown id (other token is refused anyway)
        assert client.get(f"/v1/jobs/{job}", headers=auth(other)).status_code == 401
        owner = runner.manager.get(job, "t-not-the-owner")
        assert owner is None


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::", "example.invalid"])
def test_refuses_to_listen_publicly_without_a_token(host, tmp_path):
    with pytest.raises(ConfigError, match="without a token"):
        RunnerConfig(host=host, state_dir=str(tmp_path)).validate()
    proc = subprocess.run([sys.executable, "-m", "nki_agent", "runner", "serve", "--host", host, "--port", "0",
                           "--state-dir", str(tmp_path / "s")], check=False, capture_output=True, text=True,
                          timeout=120,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2
    assert "without a token" in proc.stdout + proc.stderr


def test_short_tokens_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="shorter"):
        RunnerConfig(token="short", state_dir=str(tmp_path)).validate()


def test_full_queue_answers_503_with_retry_after(tmp_path):
    gate = GateBackend()
    with running(tmp_path, gate, queue_size=2, cache=False) as (runner, client):
        first = client.post("/v1/jobs", json=request("running"))
        assert first.status_code == 202
        assert gate.started.wait(60)
        queued = []
        for n in range(2):
            resp = client.post("/v1/jobs", json=request(f"q{n}"))
            assert resp.status_code == 202
            queued.append(resp.json()["id"])
        full = client.post("/v1/jobs", json=request("over"))
        assert full.status_code == 503
        assert full.headers["retry-after"]
        assert "queue is full" in full.json()["error"]
        gate.gate.set()
        for job in queued:  # the queue drains; then there is room again
            assert runner.manager.wait(job, "anonymous", 60).state == "done"
        done = client.post("/v1/jobs?wait=60", json=request("after"))
        assert done.status_code == 202 and done.json()["state"] == "done"


def test_rate_limit_answers_429_with_retry_after(tmp_path):
    gate = GateBackend()
    gate.gate.set()
    with running(tmp_path, gate, rate_per_minute=3) as (_, client):
        codes = [client.post("/v1/jobs", json=request(f"r{i}")).status_code for i in range(5)]
        assert codes[:3] == [202, 202, 202]
        limited = client.post("/v1/jobs", json=request("r9"))
        assert limited.status_code == 429
        assert int(limited.headers["retry-after"]) >= 1
        assert client.get("/healthz").status_code == 200


def test_oversized_bodies_are_refused(tmp_path):
    with running(tmp_path, GateBackend(), max_body_bytes=64 * 1024) as (_, client):
        huge = request(kernel="x = 1\n" * 20000)
        resp = client.post("/v1/jobs", json=huge)
        assert resp.status_code == 413

        def chunks():
            yield b'{"op": "verify", "kernel": {"name": "k.py", "text": "'
            for _ in range(100):
                yield b"a" * 1024
            yield b'"}}'

        streamed = client.post("/v1/jobs", content=chunks(), headers={"content-type": "application/json"})
        assert streamed.status_code == 413
        assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize("body", [
    b"not json", b"{}", b'{"op": "rm -rf", "kernel": {"name": "k.py", "text": ""}}',
    b'{"op": "verify", "kernel": {"name": "../../etc/passwd.py", "text": ""}}',
    b'{"op": "verify", "kernel": {"name": "k.py", "text": ""}, "seeds": 10000}',
    b'{"op": "verify", "kernel": {"name": "k.py", "text": ""}, "modules": [{"name": "k.py", "text": ""}]}',
    b'{"op": "verify", "kernel": {"name": "k.py", "text": ""}, "task_modules": [{"name": "m.py", "text": ""}]}',
    b'{"op": "verify", "kernel": {"name": "k.py", "text": ""}, "modules": [{"name": "numpy.py", "text": ""}]}',
    b'{"op": "verify", "kernel": {"name": "k.py", "text": ""}, "surprise": 1}',
    b'[1, 2, 3]', b'{"op": "verify", "kernel": {"name": "k.py", "text": 5}}',
])
def test_malformed_requests_get_clear_422s(tmp_path, body):
    with running(tmp_path, GateBackend()) as (runner, client):
        resp = client.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
        assert resp.status_code == 422, resp.text
        assert resp.json()["error"]
        assert runner.store.count("queued") == 0


def test_cancel_a_queued_and_a_running_job(tmp_path):
    gate = GateBackend()
    with running(tmp_path, gate, cache=False) as (_, client):
        a = client.post("/v1/jobs", json=request("a")).json()["id"]
        assert gate.started.wait(60)
        b = client.post("/v1/jobs", json=request("b")).json()["id"]
        assert client.delete(f"/v1/jobs/{b}").json()["state"] == "cancelled"
        client.delete(f"/v1/jobs/{a}")
        ended = client.post("/v1/jobs?wait=0.01", json=request("c"))  # the slot is free again
        assert ended.status_code == 202
        gate.gate.set()
        status_a = _wait(client, a)
        assert status_a["state"] == "cancelled"
        assert "b" not in gate.ran


def _wait(client, job_id: str) -> dict:
    with client.stream("GET", f"/v1/jobs/{job_id}/events") as resp:
        final = None
        event = None
        for line in resp.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "status":
                final = json.loads(line[6:])
        assert final is not None
        return final


def test_events_stream_progress_then_the_final_status(tmp_path):
    gate = GateBackend()
    with running(tmp_path, gate) as (_, client):
        job = client.post("/v1/jobs", json=request("ev")).json()["id"]
        assert gate.started.wait(60)
        gate.gate.set()
        lines = []
        with client.stream("GET", f"/v1/jobs/{job}/events") as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            lines = list(resp.iter_lines())
        events = [ln[7:] for ln in lines if ln.startswith("event: ")]
        assert events[0] == "progress" and events[-1] == "status"
        final = json.loads([ln for ln in lines if ln.startswith("data: ")][-1][6:])
        assert final["state"] == "done" and final["result"]["correct"] is True
        messages = [json.loads(ln[6:])["message"] for ln in [x for x in lines if x.startswith("data: ")][:-1]]
        assert "gate: waiting" in messages


def test_unchanged_code_is_answered_from_the_cache(tmp_path):
    gate = GateBackend()
    gate.gate.set()
    with running(tmp_path, gate) as (_, client):
        first = client.post("/v1/jobs?wait=60", json=request("one")).json()
        second = client.post("/v1/jobs", json=request("two")).json()
        assert first["state"] == "done" and not first["cached"]
        assert second["state"] == "done" and second["cached"] and second["result"]["correct"]
        assert second["nonce"] == "two"
        changed = client.post("/v1/jobs?wait=60", json=request("three", kernel="def nki_kernel(b):\n    return b\n"))
        assert not changed.json()["cached"]
        assert gate.ran == ["one", "three"]


def test_unknown_and_foreign_job_ids_are_404(tmp_path):
    with running(tmp_path, GateBackend()) as (_, client):
        for path in ("/v1/jobs/nope", "/v1/jobs/" + "f" * 32, "/v1/jobs/%2e%2e%2fetc"):
            assert client.get(path).status_code == 404
            assert client.delete(path).status_code == 404


def test_one_token_flooding_the_queue_does_not_lock_out_the_others(tmp_path):
    gate = GateBackend()
    tokens = tmp_path / "tokens"
    other = "second-user-token-abcdefgh"
    tokens.write_text(f"# team\n{other}\n")
    with running(tmp_path, gate, token=TOKEN, tokens_file=str(tokens), queue_size=40, queue_per_token=5,
                 cache=False) as (_, client):
        codes = [client.post("/v1/jobs", json=request(f"f{i}"), headers=auth(TOKEN)).status_code for i in range(8)]
        assert codes[:5] == [202] * 5 and set(codes[5:]) == {503}
        assert client.post("/v1/jobs", json=request("other"), headers=auth(other)).status_code == 202
        gate.gate.set()


def test_without_a_working_sandbox_untrusted_jobs_are_refused_unless_unsafe(tmp_path, monkeypatch):
    monkeypatch.setenv("NKI_AGENT_BWRAP", str(tmp_path / "no-such-bwrap"))
    gate = GateBackend()
    gate.gate.set()
    with running(tmp_path / "safe", gate) as (_, client):
        refused = client.post("/v1/jobs", json=request("x"))
        assert refused.status_code == 503
        assert "sandbox is unavailable" in refused.json()["error"]
        assert "--unsafe-no-sandbox" in refused.json()["error"]
        assert client.get("/healthz").status_code == 200
    with running(tmp_path / "unsafe", gate, unsafe_no_sandbox=True) as (_, client):
        assert client.post("/v1/jobs?wait=60", json=request("y")).json()["state"] == "done"


def test_a_client_that_lost_the_id_finds_its_job_by_nonce(tmp_path):
    gate = GateBackend()
    gate.gate.set()
    with running(tmp_path, gate, token=TOKEN) as (_, client):
        done = client.post("/v1/verify", json=request("lost-id-1"), headers=auth(TOKEN)).json()
        found = client.get("/v1/jobs", params={"nonce": "lost-id-1"}, headers=auth(TOKEN)).json()
        assert [j["id"] for j in found] == [done["id"]] and found[0]["result"]["correct"]
        assert client.get("/v1/jobs", params={"nonce": "never-sent"}, headers=auth(TOKEN)).json() == []


def test_job_folders_left_by_a_killed_runner_are_removed_at_start(tmp_path):
    stale = tmp_path / "state" / "jobs" / "job-deadbeef-x"
    stale.mkdir(parents=True)
    (stale / "kernel.py").write_text("SECRET = 'client code'\n")
    with running(tmp_path, GateBackend()):
        assert not stale.exists()


@pytest.mark.parametrize("body", [b"garbage", b"{}", b"x" * (5 * 1024 * 1024)])
def test_without_the_token_nothing_about_the_body_is_answered(tmp_path, body):
    with running(tmp_path, GateBackend(), token=TOKEN) as (runner, client):
        for path in ("/v1/jobs", "/v1/verify", "/reward", "/reward/batch"):
            resp = client.post(path, content=body, headers={"content-type": "application/json"})
            assert resp.status_code == 401, (path, resp.status_code)
        assert runner.store.count("queued") == 0
