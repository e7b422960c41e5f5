"""The Anthropic and OpenAI-compatible backends against the local fake APIs (``fakes/``).

Nothing here leaves 127.0.0.1 or needs a key; retries run with ``backoff=0`` or ``retry-after: 0``,
cancellation waits on events, never on time.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from fakes import (
    Call,
    CutOff,
    FakeAnthropic,
    FakeOpenAI,
    FakeServer,
    FakeUsage,
    Garbage,
    HttpError,
    Stall,
    StreamError,
    Text,
    ToolUse,
)
from nki_agent.agent.backends._retry import parse_retry_after
from nki_agent.agent.backends.anthropic_backend import AnthropicBackend
from nki_agent.agent.backends.openai_backend import OpenAIBackend
from nki_agent.agent.protocol import (
    BackendError,
    Message,
    ModelReply,
    ModelRequest,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)

HANG_GUARD = 60.0  # seconds a cancelled call may take before the test calls it hung (never reached when green)
TOOLS = [
    ToolSpec("compile", "Compile the kernel.", {"type": "object", "properties": {"path": {"type": "string"}}}),
    ToolSpec("verify", "Verify the kernel.", {"type": "object", "properties": {"seeds": {"type": "integer"}}}),
]
ARGS_1 = {"path": "kernels/softmax.py", "opts": {"target": "trn2", "fast": True}}
ARGS_2 = {"seeds": 3}


@pytest.fixture(autouse=True)
def _no_ambient_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY",
                "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)


def make(api: str, fake: FakeServer, **kw: Any) -> Any:
    kw.setdefault("backoff", 0)
    if api == "anthropic":
        return AnthropicBackend(api_key="test-key", base_url=fake.base_url, **kw)
    return OpenAIBackend(model="fine-tuned-nki", base_url=fake.base_url, **kw)


def fake_for(api: str, script: Any = None) -> FakeServer:
    return FakeAnthropic(script) if api == "anthropic" else FakeOpenAI(script)


def request(messages: list[Message] | None = None, **kw: Any) -> ModelRequest:
    return ModelRequest(system="You fix NKI kernels.", messages=messages or [Message("user", "Fix k.py")],
                        tools=TOOLS, **kw)


APIS = ["anthropic", "openai"]
STREAM = [pytest.param(True, id="stream"), pytest.param(False, id="json")]


# conversation round trip ---------------------------------------------------------------------------

@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize("api", APIS)
def test_multi_turn_tool_use_round_trip(api: str, stream: bool) -> None:
    script = [ToolUse([Call("compile", ARGS_1), Call("verify", ARGS_2)], text="Compiling first."), Text("Fixed.")]
    with fake_for(api, script) as fake:
        backend = make(api, fake)
        first = backend.complete(request(stream=stream))
        assert first.text == "Compiling first."
        assert first.stop_reason == "tool_use"
        assert [(c.name, c.arguments) for c in first.tool_calls] == [("compile", ARGS_1), ("verify", ARGS_2)]
        id1, id2 = (c.id for c in first.tool_calls)
        conversation = [
            Message("user", "Fix k.py"),
            Message("assistant", first.text, tool_calls=first.tool_calls),
            Message("user", "Go on.", tool_results=[ToolResult(id1, "compiled"),
                                                   ToolResult(id2, "mismatch at [0, 3]", is_error=True)]),
        ]
        second = backend.complete(request(conversation, stream=stream))
        assert (second.text, second.tool_calls, second.stop_reason) == ("Fixed.", [], "end_turn")
        body = fake.requests[1].body
    assert body.get("stream", False) is stream
    if api == "anthropic":
        assert body["model"] == backend.model and body["max_tokens"] == 8192
        assert body["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "Fix k.py"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Compiling first."},
                {"type": "tool_use", "id": id1, "name": "compile", "input": ARGS_1},
                {"type": "tool_use", "id": id2, "name": "verify", "input": ARGS_2}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id1, "content": "compiled", "is_error": False},
                {"type": "tool_result", "tool_use_id": id2, "content": "mismatch at [0, 3]", "is_error": True},
                {"type": "text", "text": "Go on.", "cache_control": {"type": "ephemeral"}}]},
        ]
    else:
        assert body["model"] == "fine-tuned-nki"
        assert body["messages"] == [
            {"role": "system", "content": "You fix NKI kernels."},
            {"role": "user", "content": "Fix k.py"},
            {"role": "assistant", "content": "Compiling first.", "tool_calls": [
                {"id": id1, "type": "function", "function": {"name": "compile", "arguments": json.dumps(ARGS_1)}},
                {"id": id2, "type": "function", "function": {"name": "verify", "arguments": json.dumps(ARGS_2)}}]},
            {"role": "tool", "tool_call_id": id1, "content": "compiled"},
            {"role": "tool", "tool_call_id": id2, "content": "Error: mismatch at [0, 3]"},
            {"role": "user", "content": "Go on."},
        ]
        assert body["tools"][0] == {"type": "function", "function": {
            "name": "compile", "description": "Compile the kernel.", "parameters": TOOLS[0].input_schema}}


@pytest.mark.parametrize("api", APIS)
def test_streaming_delivers_text_deltas_and_assembles_tool_input(api: str) -> None:
    text = "I will compile the kernel and then verify it on three seeds."
    deltas: list[str] = []
    with fake_for(api, [ToolUse([Call("compile", ARGS_1)], text=text)]) as fake:
        reply = make(api, fake).complete(request(stream=True, on_text=deltas.append))
        body = fake.requests[0].body
    assert len(deltas) > 3 and "".join(deltas) == text == reply.text
    assert reply.tool_calls[0].arguments == ARGS_1  # joined from many partial JSON pieces
    assert body["stream"] is True
    if api == "openai":
        assert body["stream_options"] == {"include_usage": True}


def test_openai_malformed_arguments_become_raw_and_round_trip() -> None:
    with FakeOpenAI([ToolUse([Call("compile", '{"path": "k.py"')]), ToolUse([Call("compile", "[1, 2]")]),
                     Text("ok")]) as fake:
        backend = make("openai", fake)
        streamed = backend.complete(request(stream=True))
        plain = backend.complete(request(stream=False))
        assert streamed.tool_calls[0].arguments == {"_raw": '{"path": "k.py"'}
        assert plain.tool_calls[0].arguments == {"_raw": "[1, 2]"}
        backend.complete(request([Message("user", "x"), Message("assistant", "", tool_calls=streamed.tool_calls),
                                  Message("user", tool_results=[ToolResult(streamed.tool_calls[0].id, "bad")])]))
        sent = fake.requests[2].body["messages"][2]
    assert sent["tool_calls"][0]["function"]["arguments"] == '{"path": "k.py"'  # verbatim, as the model wrote it


def test_anthropic_malformed_stream_input_becomes_raw() -> None:
    with FakeAnthropic([ToolUse([Call("compile", '{"path": ')])]) as fake:
        reply = make("anthropic", fake).complete(request(stream=True))
    assert reply.tool_calls[0].arguments == {"_raw": '{"path": '}


@pytest.mark.parametrize(("api", "fake_stop", "ours"), [
    ("anthropic", "max_tokens", "max_tokens"), ("anthropic", "stop_sequence", "end_turn"),
    ("anthropic", "refusal", "refusal"), ("anthropic", "pause_turn", "other"),
    ("openai", "length", "max_tokens"), ("openai", "content_filter", "refusal"), ("openai", "stop", "end_turn"),
])
@pytest.mark.parametrize("stream", STREAM)
def test_stop_reasons(api: str, fake_stop: str, ours: str, stream: bool) -> None:
    with fake_for(api, [Text("cut", stop_reason=fake_stop)]) as fake:
        assert make(api, fake).complete(request(stream=stream)).stop_reason == ours


# usage and caching ---------------------------------------------------------------------------------

@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize(("api", "expected"), [
    ("anthropic", Usage(input_tokens=11, output_tokens=7, cache_read_tokens=500, cache_write_tokens=300)),
    ("openai", Usage(input_tokens=11, output_tokens=7, cache_read_tokens=500, cache_write_tokens=0)),
])
def test_usage_mapped(api: str, expected: Usage, stream: bool) -> None:
    usage = FakeUsage(input_tokens=11, output_tokens=7, cache_read_tokens=500, cache_write_tokens=300)
    with fake_for(api, [Text("hi", usage=usage)]) as fake:
        reply = make(api, fake).complete(request(stream=stream))
    assert reply.usage == expected
    assert reply.model == "fake-model"


def test_prompt_caching_markers() -> None:
    with FakeAnthropic(["a", "b"]) as fake:
        make("anthropic", fake).complete(request())
        make("anthropic", fake, prompt_caching=False).complete(request())
        cached, plain = fake.bodies
    assert cached["system"] == [{"type": "text", "text": "You fix NKI kernels.", "cache_control": {"type": "ephemeral"}}]
    assert [t.get("cache_control") for t in cached["tools"]] == [None, {"type": "ephemeral"}]
    assert cached["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in json.dumps(plain)
    assert plain["system"] == [{"type": "text", "text": "You fix NKI kernels."}]


# retries and errors ------------------------------------------------------------------------------

RETRYABLE = [("anthropic", 429, "rate_limit"), ("anthropic", 500, "server"), ("anthropic", 529, "overloaded"),
             ("openai", 429, "rate_limit"), ("openai", 500, "server"), ("openai", 503, "overloaded")]


@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize(("api", "status", "kind"), RETRYABLE)
def test_transient_errors_are_retried_then_succeed(api: str, status: int, kind: str, stream: bool) -> None:
    # default backoff (1 s) but the fake says retry-after: 0, so nothing waits
    with fake_for(api, [HttpError(status), HttpError(status), Text("ok")]) as fake:
        reply = make(api, fake, backoff=1.0).complete(request(stream=stream))
        assert (reply.text, reply.retries) == ("ok", 2)
        assert len(fake.requests) == 3


@pytest.mark.parametrize(("api", "status", "kind"), RETRYABLE)
def test_retry_exhaustion_raises_the_last_error(api: str, status: int, kind: str) -> None:
    with fake_for(api, [HttpError(status, "busy")] * 3) as fake:
        with pytest.raises(BackendError) as err:
            make(api, fake, max_retries=2).complete(request())
        assert len(fake.requests) == 3
    assert (err.value.kind, err.value.status, err.value.retryable) == (kind, status, True)
    assert "gave up after 2 retries" in str(err.value)


@pytest.mark.parametrize(("status", "kind"), [(401, "auth"), (403, "auth"), (400, "bad_request"),
                                              (404, "bad_request"), (422, "bad_request")])
@pytest.mark.parametrize("api", APIS)
def test_client_errors_are_not_retried(api: str, status: int, kind: str) -> None:
    with fake_for(api, [HttpError(status, "nope"), Text("never")]) as fake:
        with pytest.raises(BackendError) as err:
            make(api, fake).complete(request())
        assert len(fake.requests) == 1
    assert (err.value.kind, err.value.status, err.value.retryable) == (kind, status, False)
    assert "nope" in str(err.value)


@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize("api", APIS)
def test_garbage_body_is_bad_response(api: str, stream: bool) -> None:
    with fake_for(api, [Garbage(), Text("never")]) as fake:
        with pytest.raises(BackendError) as err:
            make(api, fake).complete(request(stream=stream))
        assert len(fake.requests) == 1
    assert err.value.kind == "bad_response"


@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize("api", APIS)
def test_cut_off_response_is_a_connection_error_and_retried(api: str, stream: bool) -> None:
    with fake_for(api, [CutOff(Text("a long answer cut in the middle"), after=4), Text("whole")]) as fake:
        reply = make(api, fake).complete(request(stream=stream))
    assert (reply.text, reply.retries) == ("whole", 1)
    with fake_for(api, [CutOff(Text("cut"), after=2)]) as fake, pytest.raises(BackendError) as err:
        make(api, fake, max_retries=0).complete(request(stream=stream))
    assert (err.value.kind, err.value.retryable) == ("connection", True)


@pytest.mark.parametrize("api", APIS)
def test_error_event_mid_stream_is_retried(api: str) -> None:
    with fake_for(api, [StreamError("overloaded_error"), Text("after")]) as fake:
        reply = make(api, fake).complete(request(stream=True))
    assert (reply.text, reply.retries) == ("after", 1)


def test_connection_refused_is_retried_then_raised() -> None:
    with FakeOpenAI() as fake:
        url = fake.base_url
    backend = OpenAIBackend(model="m", base_url=url, max_retries=1, backoff=0)  # the port is closed now
    with pytest.raises(BackendError) as err:
        backend.complete(request())
    assert (err.value.kind, err.value.retryable) == ("connection", True)


@pytest.mark.parametrize(("reply", "backoff", "expected"), [
    (HttpError(429, retry_after="7"), 1.0, (7.0, 7.0)),  # retry-after wins over the backoff
    (HttpError(529, retry_after=None, headers={"retry-after-ms": "1500"}), 1.0, (1.5, 1.5)),
    (HttpError(500, retry_after=None), 2.0, (1.5, 2.0)),  # no hint: backoff with jitter (75..100 %)
    (HttpError(429, retry_after="7"), 0.0, (0.0, 0.0)),  # backoff 0: never wait
])
def test_retry_delay_honours_retry_after(reply: HttpError, backoff: float, expected: tuple[float, float]) -> None:
    delays: list[float] = []
    with FakeAnthropic([reply, "ok"]) as fake:
        backend = make("anthropic", fake, backoff=backoff)

        def record(seconds: float, cancel: threading.Event | None) -> bool:
            delays.append(seconds)
            return False

        backend._sleep = record
        assert backend.complete(request()).retries == 1
    lo, hi = expected
    assert len(delays) == 1 and lo <= delays[0] <= hi


@pytest.mark.parametrize(("headers", "expected"), [
    ({}, None), ({"retry-after": "3"}, 3.0), ({"retry-after": "0.5"}, 0.5), ({"retry-after-ms": "250"}, 0.25),
    ({"retry-after": "-4"}, 0.0), ({"retry-after": "86400"}, 60.0), ({"retry-after": "soon"}, None),
    ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date in the past: retry now
])
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert parse_retry_after(headers) == expected


# keys --------------------------------------------------------------------------------------------

def test_missing_anthropic_key_fails_without_a_request() -> None:
    with FakeAnthropic(["never"]) as fake:
        with pytest.raises(BackendError) as err:
            AnthropicBackend(base_url=fake.base_url).complete(request())
        assert fake.requests == []
    assert err.value.kind == "auth" and "ANTHROPIC_API_KEY" in str(err.value)


def test_anthropic_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    with FakeAnthropic(["ok"], require_key="env-key") as fake:
        assert AnthropicBackend(base_url=fake.base_url).complete(request()).text == "ok"


def test_openai_key_is_the_argument_or_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    with FakeOpenAI(["a", "b"]) as fake:
        OpenAIBackend(model="m", base_url=fake.base_url, backoff=0).complete(request())
        OpenAIBackend(model="m", base_url=fake.base_url, api_key="served-key", backoff=0).complete(request())
        auth = [r.headers["authorization"] for r in fake.requests]
    assert auth == ["Bearer EMPTY", "Bearer served-key"]


# cancellation ------------------------------------------------------------------------------------

def _call_in_thread(fn: Callable[[], ModelReply]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, errors


@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize("api", APIS)
def test_cancel_during_a_stalled_response(api: str, stream: bool) -> None:
    stall = Stall()
    cancel = threading.Event()
    with fake_for(api, [stall]) as fake:
        backend = make(api, fake)
        thread, errors = _call_in_thread(lambda: backend.complete(request(stream=stream, cancel=cancel)))
        stall.stalled.wait()
        cancel.set()
        thread.join(HANG_GUARD)
        assert not thread.is_alive(), "the backend did not stop while the server stalled"
    assert len(errors) == 1 and isinstance(errors[0], BackendError) and errors[0].kind == "cancelled"


@pytest.mark.parametrize("api", APIS)
def test_cancel_from_on_text_stops_the_stream(api: str) -> None:
    cancel = threading.Event()
    seen: list[str] = []

    def on_text(delta: str) -> None:
        seen.append(delta)
        cancel.set()

    with fake_for(api, [Stall(text="Thinking")]) as fake, pytest.raises(BackendError) as err:
        make(api, fake).complete(request(on_text=on_text, cancel=cancel))
    assert err.value.kind == "cancelled" and seen == ["Thinking"]


@pytest.mark.parametrize("api", APIS)
def test_cancelled_before_the_call_sends_nothing(api: str) -> None:
    cancel = threading.Event()
    cancel.set()
    with fake_for(api, ["never"]) as fake:
        with pytest.raises(BackendError) as err:
            make(api, fake).complete(request(cancel=cancel))
        assert fake.requests == []
    assert err.value.kind == "cancelled"


def test_cancel_during_retry_wait() -> None:
    cancel = threading.Event()
    with FakeAnthropic([HttpError(529), "never"]) as fake:
        backend = make("anthropic", fake, backoff=1.0)

        def sleep(seconds: float, ev: threading.Event | None) -> bool:
            cancel.set()  # the user cancels while the backend waits to retry
            return ev is not None and ev.is_set()

        backend._sleep = sleep
        with pytest.raises(BackendError) as err:
            backend.complete(request(cancel=cancel))
        assert len(fake.requests) == 1
    assert err.value.kind == "cancelled"


@pytest.mark.parametrize("api", APIS)
def test_on_text_exceptions_propagate_unchanged(api: str) -> None:
    class Boom(Exception):
        pass

    def on_text(delta: str) -> None:
        raise Boom(delta)

    with fake_for(api, ["hello"]) as fake, pytest.raises(Boom):
        make(api, fake).complete(request(on_text=on_text))


def test_reply_tool_calls_are_protocol_objects() -> None:
    with FakeAnthropic([ToolUse([Call("compile", {}, id="toolu_given")])]) as fake:
        reply = make("anthropic", fake).complete(request(stream=False))
    assert reply.tool_calls == [ToolCall("toolu_given", "compile", {})]


@pytest.mark.parametrize("api", APIS)
def test_handler_script_drives_a_tool_loop(api: str) -> None:
    """A ``handler(body)`` script: call a tool until the conversation carries its result."""

    def handler(body: dict[str, Any]) -> Text | ToolUse:
        if "compiled OK" in json.dumps(body["messages"]):
            return Text("Verified.")
        return ToolUse([Call("compile", {"path": "k.py"})])

    with fake_for(api, handler) as fake:
        backend = make(api, fake)
        first = backend.complete(request())
        call = first.tool_calls[0]
        done = backend.complete(request([Message("user", "Fix k.py"), Message("assistant", tool_calls=[call]),
                                         Message("user", tool_results=[ToolResult(call.id, "compiled OK")])]))
    assert (call.name, done.text) == ("compile", "Verified.")


def test_handler_exception_is_reported_not_retried() -> None:
    def handler(body: dict[str, Any]) -> Text:
        raise RuntimeError("script bug")

    with FakeAnthropic(handler) as fake:
        with pytest.raises(BackendError) as err:
            make("anthropic", fake).complete(request())
        assert len(fake.requests) == 1 and isinstance(fake.errors[0], RuntimeError)
    assert err.value.kind == "bad_request" and "script bug" in str(err.value)
