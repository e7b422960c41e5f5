"""``RemoteRunner`` against a real runner (simulator backend, the OS jail) on 127.0.0.1.

Remote verdicts equal local ones, the runner's paths come back as the client's own (kernel, task,
sibling modules, related locations), sibling modules travel with the kernel, cancel ends a running
job, and transport failures are the three clear exceptions. Waiting is event-driven: job states
come from the runner's event stream or its status, never from sleeps.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import httpx
import pytest
from nki_agent.runner.client import (
    JobFailed,
    RemoteRunner,
    RunnerBusy,
    RunnerError,
    RunnerRefused,
    RunnerUnavailable,
)
from nki_agent.toolchain import api
from nki_agent.toolchain.isolation import runner
from nki_agent.toolchain.protocol.jobs import JobRequest, SourceFile
from remote_kernels import BAD_LINE, HANG, ROOT, sibling_project

ADD = ROOT / "examples" / "l1_add"
MATMUL = ROOT / "examples" / "l2_matmul"
PSUM = ROOT / "tests" / "fixtures" / "broken" / "psum_overflow.py"
TOKEN = "client-test-token-0123456789"


def _rel(p: Path) -> str:
    return os.path.relpath(p, ROOT)


@pytest.fixture(autouse=True)
def _in_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # paths as a user types them: relative to the checkout
    monkeypatch.delenv("NKI_AGENT_RUNNER_TOKEN", raising=False)


@pytest.mark.parametrize("kernel,task", [(ADD / "kernel_classic.py", ADD / "task.py"),
                                         (MATMUL / "kernel_new.py", MATMUL / "task.py")], ids=["add", "matmul"])
def test_every_op_through_the_runner_matches_local(runner_url: str, kernel: Path, task: Path) -> None:
    k, t = _rel(kernel), _rel(task)
    with RemoteRunner(runner_url) as remote:
        local = api.verify(k, t, seeds=2)
        got = remote.verify(k, t, seeds=2)
        assert (got.compiled, got.correct, got.stage) == (local.compiled, local.correct, local.stage) == (
            True, True, "correct")
        assert (got.kernel, got.task, got.runner, got.backend) == (k, t, runner_url, "simulator")
        assert [s.seed for s in got.seeds if not s.hidden] == [0, 1]
        assert any(s.hidden and s.seed is None for s in got.seeds)  # the runner's own secret seed

        sim, local_sim = remote.simulate(k, t, seed=1), api.simulate(k, t, seed=1)
        assert sim.ran and local_sim.ran and (sim.kernel, sim.runner) == (k, runner_url)
        assert [o.shape for o in sim.outputs] == [o.shape for o in local_sim.outputs]
        assert sim.target == local_sim.target and sim.peak_sbuf_bytes == local_sim.peak_sbuf_bytes

        comp = remote.compile(k, t)
        assert comp.compiled and comp.stage == "compiled" and comp.runner == runner_url

        prof = remote.profile(k, t, seeds=1, warmup=0, iterations=1)
        assert prof.correct and prof.latency.kind in ("not measured", "estimated") and prof.runner == runner_url


def test_a_broken_kernel_reports_the_local_problem_at_the_clients_path(runner_url: str) -> None:
    k = _rel(PSUM)
    local = api.verify(k, k, seeds=1)
    with RemoteRunner(runner_url) as remote:
        got = remote.verify(k, k, seeds=1)
    assert got.compiled == local.compiled and not got.correct and got.max_abs_error == local.max_abs_error
    assert [(p.code, p.location) for p in got.problems] == [(p.code, p.location) for p in local.problems]
    assert got.problems[0].location is not None and got.problems[0].location.path == k
    assert (got.kernel, got.task) == (k, k)


def test_sibling_modules_travel_with_the_kernel_and_map_back(runner_url: str, tmp_path: Path) -> None:
    kernel, task = sibling_project(tmp_path / "proj")
    with RemoteRunner(runner_url) as remote:
        ok = remote.verify(str(kernel), str(task), seeds=1)
        assert ok.correct, ok.problems
        bad_kernel, _ = sibling_project(tmp_path / "bad", "my-kernel.py", helper="tile_bad")  # not a module name
        bad = remote.verify(str(bad_kernel), str(task), seeds=1)
    local = api.verify(str(bad_kernel), str(task), seeds=1)
    assert not bad.compiled and [p.code for p in bad.problems] == [p.code for p in local.problems]
    p = bad.problems[0]
    assert p.location is not None and (p.location.path, p.location.line) == (str(tmp_path / "bad" / "tile_helpers.py"),
                                                                              BAD_LINE)
    assert {r.location.path for r in p.related} == {str(bad_kernel)}
    assert bad.kernel == str(bad_kernel)


def test_a_candidate_copy_imports_helpers_from_its_search_path(runner_url: str, tmp_path: Path) -> None:
    """The fix agent's pattern: a temp copy of the kernel, the user's folder on ``search_path``."""
    kernel, task = sibling_project(tmp_path / "proj")
    copy = tmp_path / "candidate" / "kernel.py"
    copy.parent.mkdir()
    copy.write_text(kernel.read_text())
    with RemoteRunner(runner_url) as remote:
        res = remote.verify(str(copy), str(task), seeds=1, search_path=[str(kernel.parent)], protect=[str(kernel)])
    assert res.correct, res.problems
    assert res.kernel == str(copy)


def test_runner_use_sends_every_tool_job_to_the_runner_and_describe_stays_local(runner_process) -> None:
    """``runner.use`` is process-wide: the runner must be another process (an in-process runner's backend
    would hand its own jobs back to the installed RemoteRunner)."""
    k, t = _rel(ADD / "kernel_classic.py"), _rel(ADD / "task.py")
    remote = RemoteRunner(runner_process.url, token=runner_process.token)
    previous = runner.use(remote)
    try:
        assert api.verify(k, t, seeds=1).runner == runner_process.url
        assert api.compile(k, t).runner == runner_process.url
        described = api.describe_task(t)
        assert [a.shape for a in described.inputs] == [[2112, 1024], [2112, 1024]] and not described.problems
    finally:
        runner.use(previous)
        remote.close()
    assert runner.current() is previous


def test_raw_job_api_events_then_result(runner_url: str) -> None:
    text = (ADD / "kernel_classic.py").read_text()
    with RemoteRunner(runner_url) as remote:
        caps = remote.capabilities()
        assert caps.backend == "simulator" and remote.health().ok
        request = JobRequest(op="simulate", kernel=SourceFile(name="k.py", text=text),
                             task=SourceFile(name="t.py", text=(ADD / "task.py").read_text()), nonce="n-1")
        status = remote.submit(request)
        assert status.nonce == "n-1" and status.op == "simulate"
        events = list(remote.events(status.id))
        assert events and events[-1].state == "done"
        assert [e.seq for e in events] == sorted({e.seq for e in events})
        result = remote.result(status.id, wait=120)
        assert result.op == "simulate" and result.ran
        assert remote.status(status.id).state == "done"
        with pytest.raises(RunnerError) as missing:
            remote.status("0" * 32)
        assert missing.value.status == 404


def test_cancel_a_running_job_through_the_raw_api(runner_url: str) -> None:
    with RemoteRunner(runner_url) as remote:
        status = remote.submit(JobRequest(op="verify", kernel=SourceFile(name="hang.py", text=HANG), seeds=1))
        for e in remote.events(status.id):
            if e.state == "running":
                break
        assert remote.cancel(status.id).id == status.id
        with pytest.raises(JobFailed) as ended:
            remote.result(status.id, wait=120)
        assert ended.value.job.state == "cancelled"


class _Spy(httpx.HTTPTransport):
    """A real transport that signals when the client follows a job (it has been accepted)."""

    def __init__(self, sse: bool = True) -> None:
        super().__init__()
        self.following = threading.Event()
        self.sse = sse
        self.paths: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(f"{request.method} {request.url.path}")
        if request.url.path.endswith("/events"):
            self.following.set()
            if not self.sse:  # a proxy that does not pass event streams
                return httpx.Response(200, headers={"content-type": "text/html"}, text="<html>no</html>")
        return super().handle_request(request)


def test_cancel_event_deletes_the_job_and_answers_cancelled(runner_factory, tmp_path: Path) -> None:
    live = runner_factory()
    hang = tmp_path / "hang.py"
    hang.write_text(HANG)
    spy = _Spy()
    cancel = threading.Event()
    with RemoteRunner(live.url, transport=spy) as remote:
        out: list[object] = []
        worker = threading.Thread(target=lambda: out.append(remote.verify(str(hang), str(hang), seeds=1, timeout=300,
                                                                           cancel=cancel)))
        worker.start()
        assert spy.following.wait(60)
        cancel.set()
        worker.join(60)
        assert not worker.is_alive()
    res = out[0]
    assert [p.code for p in res.problems] == ["sim_cancelled"] and not res.correct  # type: ignore[attr-defined]
    deletes = [p for p in spy.paths if p.startswith("DELETE /v1/jobs/")]
    assert len(deletes) == 1
    job = deletes[0].rsplit("/", 1)[1]
    final = live.service.manager.wait(job, "anonymous", 60)
    assert final is not None and final.state == "cancelled"


class _LostAnswer(httpx.HTTPTransport):
    """Delivers the first submission to the runner, then drops the connection before its answer."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0
        self.nonces: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST" and request.url.path == "/v1/jobs":
            self.nonces.append(json.loads(request.content)["nonce"])
        if request.method == "POST" and request.url.path == "/v1/jobs" and not self.dropped:
            response.read()
            self.dropped += 1
            raise httpx.ReadError("connection reset by peer", request=request)
        return response


def test_a_lost_submission_answer_finds_the_job_by_its_nonce(runner_factory) -> None:
    live = runner_factory()
    lost = _LostAnswer()
    with RemoteRunner(live.url, transport=lost) as remote:
        res = remote.verify(_rel(ADD / "kernel_classic.py"), _rel(ADD / "task.py"), seeds=1)
    assert lost.dropped == 1 and res.correct and res.runner == live.url
    assert len(lost.nonces) == 1 and len(live.service.manager.find("anonymous", lost.nonces[0])) == 1  # not resent


def test_polls_when_the_event_stream_is_unavailable(runner_url: str) -> None:
    spy = _Spy(sse=False)
    k, t = _rel(ADD / "kernel_classic.py"), _rel(ADD / "task.py")
    with RemoteRunner(runner_url, transport=spy) as remote:
        res = remote.verify(k, t, seeds=1)
    assert res.correct
    assert sum(p.startswith("GET /v1/jobs/") and not p.endswith("/events") for p in spy.paths) >= 1


def test_a_dead_runner_is_unavailable_with_its_url(dead_url: str) -> None:
    with RemoteRunner(dead_url, timeout=10) as remote:
        with pytest.raises(RunnerUnavailable) as e:
            remote.verify(_rel(ADD / "kernel_classic.py"), _rel(ADD / "task.py"))
        assert dead_url in str(e.value) and "refused" in str(e.value)
        with pytest.raises(RunnerUnavailable):
            remote.health()


def test_a_wrong_or_missing_token_is_refused_and_never_shown(runner_factory) -> None:
    live = runner_factory(token=TOKEN)
    wrong = "wrong-token-abcdefghijklmnop"
    for token in (wrong, ""):
        with RemoteRunner(live.url, token=token) as remote:
            with pytest.raises(RunnerRefused) as e:
                remote.verify(_rel(ADD / "kernel_classic.py"), _rel(ADD / "task.py"))
            assert "wrong or missing token" in str(e.value) and e.value.status == 401
            assert wrong not in str(e.value) + repr(remote) and TOKEN not in str(e.value)
    with RemoteRunner(live.url, token=TOKEN) as remote:
        assert remote.capabilities().backend == "simulator" and TOKEN not in repr(remote)


def test_the_token_comes_from_the_environment(runner_factory, monkeypatch: pytest.MonkeyPatch) -> None:
    live = runner_factory(token=TOKEN)
    monkeypatch.setenv("NKI_AGENT_RUNNER_TOKEN", TOKEN)
    with RemoteRunner(live.url) as remote:
        assert remote.capabilities().backend == "simulator"


def _answers(*responses: httpx.Response) -> tuple[httpx.MockTransport, list[str]]:
    seen: list[str] = []
    queue = list(responses)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return httpx.MockTransport(handle), seen


def test_busy_answers_are_retried_after_retry_after_then_busy() -> None:
    busy = httpx.Response(503, headers={"Retry-After": "0"}, json={"error": "the queue is full"})
    transport, seen = _answers(busy)
    with RemoteRunner("http://127.0.0.1:9", transport=transport, retries=2) as remote, \
            pytest.raises(RunnerBusy) as e:
        remote.capabilities()
    assert len(seen) == 3 and "the queue is full" in str(e.value) and e.value.retry_after == 0


def test_a_rate_limit_clears_within_the_retries() -> None:
    health = httpx.Response(200, json={"ok": True, "backend": "simulator"})
    limited = httpx.Response(429, headers={"Retry-After": "0"}, json={"error": "rate limit"})
    transport, seen = _answers(limited, limited, health)
    with RemoteRunner("http://127.0.0.1:9", transport=transport, retries=3) as remote:
        assert remote.health().ok
    assert len(seen) == 3


def test_a_503_without_retry_after_is_a_refusal() -> None:
    refusal = httpx.Response(503, json={"error": "the OS sandbox is unavailable on this host"})
    transport, seen = _answers(refusal)
    with RemoteRunner("http://127.0.0.1:9", transport=transport) as remote, pytest.raises(RunnerRefused) as e:
        remote.health()
    assert len(seen) == 1 and "sandbox is unavailable" in str(e.value)


def test_an_unreadable_kernel_is_a_problem_not_an_exception(tmp_path: Path) -> None:
    transport, seen = _answers(httpx.Response(500))
    with RemoteRunner("http://127.0.0.1:9", transport=transport) as remote:
        res = remote.verify(str(tmp_path / "missing.py"), str(tmp_path / "missing.py"))
        cancelled = threading.Event()
        cancelled.set()
        early = remote.simulate(_rel(ADD / "kernel_classic.py"), _rel(ADD / "task.py"), cancel=cancelled)
    assert [p.code for p in res.problems] == ["sim_bad_input"] and not seen
    assert [p.code for p in early.problems] == ["sim_cancelled"]


def test_with_roots_a_module_imported_from_outside_is_withheld(tmp_path: Path) -> None:
    """A cloned project's helper that is a symlink out of it (or a module on a search path outside) is not sent."""
    proj, home = tmp_path / "proj", tmp_path / "home"
    proj.mkdir()
    home.mkdir()
    (home / "credentials.py").write_text('AWS_SECRET = "s3cr3t-value"\n')
    (proj / "helper.py").symlink_to(home / "credentials.py")
    (proj / "inside.py").write_text("SCALE = 2\n")
    kernel = proj / "kernel.py"
    kernel.write_text("import helper\nimport inside\n" + (ROOT / "examples" / "l1_add" / "kernel_new.py").read_text())
    bodies: list[bytes] = []

    def handle(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        return httpx.Response(400, json={"error": "stop here"})

    for roots, sent in ((None, True), ([str(proj)], False)):
        bodies.clear()
        with RemoteRunner("http://127.0.0.1:9", transport=httpx.MockTransport(handle), roots=roots) as remote:
            remote.verify(str(kernel), str(ROOT / "examples" / "l1_add" / "task.py"))
        body = b"".join(bodies)
        assert b"SCALE = 2" in body  # the project's own module travels
        assert (b"s3cr3t-value" in body) is sent
