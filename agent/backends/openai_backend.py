"""The OpenAI-compatible backend: one ``ModelRequest`` -> one chat-completions call with tools.

For any server that speaks ``POST {base_url}/chat/completions`` (vLLM, SGLang, TGI, llama.cpp, a
fine-tuned model behind one of those, or OpenAI itself). Owns the conversion of protocol messages
(system first; assistant ``tool_calls`` with JSON-string arguments; tool results as ``role: "tool"``
messages before any user text), stream assembly (``delta.content`` to ``on_text``, ``delta.tool_calls``
joined by index, usage from the final chunk via ``stream_options.include_usage``) and the mapping of
failures to ``BackendError`` kinds. Retries are ours (SDK ``max_retries=0``); see ``_retry``.

Malformed tool-call arguments (common with small fine-tuned models) do not fail the call: the
``ToolCall`` gets ``{"_raw": "<the text>"}`` so the tool layer can answer with a schema error and the
model can correct itself; the raw text is echoed back verbatim in the next request.

The key is only the ``api_key`` argument (never ``OPENAI_API_KEY``: this backend talks to arbitrary
servers, and a real OpenAI key must not leak to them); without one it sends "EMPTY" like vLLM's docs.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from typing import Any

import openai

from ..protocol import (
    BackendError,
    ErrorKind,
    Message,
    ModelReply,
    ModelRequest,
    StopReason,
    ToolCall,
    ToolSpec,
    Usage,
)
from ._retry import (
    Sleeper,
    TransientError,
    check_cancel,
    parse_arguments,
    parse_retry_after,
    pump,
    wait,
    with_retries,
)

NO_KEY = "EMPTY"  # what vLLM's docs pass when the server has no --api-key; the SDK refuses to run without one
ERROR_PREFIX = "Error: "  # chat completions have no is_error flag: a failed tool's result says so in words

_FINISH: dict[str, StopReason] = {"stop": "end_turn", "tool_calls": "tool_use", "function_call": "tool_use",
                                  "length": "max_tokens", "content_filter": "refusal"}


class _CallbackError(Exception):
    """An exception of the caller's ``on_text``: re-raised as is, never mapped to a backend error."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


class OpenAIBackend:
    """``ModelBackend`` over an OpenAI-compatible chat-completions endpoint (``name`` "openai")."""

    name = "openai"

    def __init__(self, model: str, base_url: str, api_key: str | None = None, max_retries: int = 4,
                 timeout: float = 120.0, backoff: float = 1.0, stream_usage: bool = True):
        self.model = model
        self.base_url = base_url
        self.max_retries = max_retries
        self.timeout = timeout
        self.backoff = backoff
        self.stream_usage = stream_usage  # False for servers that reject ``stream_options``
        self._api_key = api_key or NO_KEY
        self._client: openai.OpenAI | None = None
        self._lock = threading.Lock()
        self._sleep: Sleeper = wait  # tests swap this to record the delays instead of waiting

    # public --------------------------------------------------------------------------------------
    def complete(self, request: ModelRequest) -> ModelReply:
        check_cancel(request.cancel)
        client = self._get_client()
        params = self.build_params(request)
        return with_retries(lambda: self._attempt(client, params, request), max_retries=self.max_retries,
                            backoff=self.backoff, cancel=request.cancel, sleep=self._sleep)

    def build_params(self, request: ModelRequest) -> dict[str, Any]:
        """The chat-completions request body (without ``stream``) for ``request``."""
        params: dict[str, Any] = {"model": self.model, "messages": to_openai_messages(request.system,
                                                                                     request.messages),
                                  # max_tokens, not max_completion_tokens: every compatible server knows it
                                  "max_tokens": request.max_tokens}
        if request.tools:
            params["tools"] = to_openai_tools(request.tools)
        if request.temperature is not None:
            params["temperature"] = request.temperature
        return params

    def close(self) -> None:
        """Release the HTTP connections (a later ``complete`` opens new ones)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # internals -----------------------------------------------------------------------------------
    def _get_client(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                self._client = openai.OpenAI(api_key=self._api_key, base_url=self.base_url, max_retries=0,
                                             timeout=self.timeout)
            return self._client

    def _attempt(self, client: openai.OpenAI, params: dict[str, Any], request: ModelRequest) -> ModelReply:
        try:
            if request.stream:
                extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if self.stream_usage else {}
                chunks = pump(lambda: client.chat.completions.create(**params, **extra, stream=True),
                              request.cancel)
                return self._assemble(chunks, request.on_text)
            (completion,) = pump(lambda: [client.chat.completions.create(**params)], request.cancel)
            return self._from_completion(completion)
        except _CallbackError as e:
            raise e.error from None
        except BackendError:
            raise
        except Exception as e:
            raise map_error(e) from e

    def _from_completion(self, completion: Any) -> ModelReply:
        if not completion.choices:
            raise BackendError("bad_response", "the chat completion has no choices")
        choice = completion.choices[0]
        message = choice.message
        calls = [ToolCall(id=str(tc.id or f"call_{n}"), name=str(tc.function.name),
                          arguments=parse_arguments(tc.function.arguments or ""))
                 for n, tc in enumerate(message.tool_calls or [])]
        return ModelReply(text=message.content or "", tool_calls=calls,
                          stop_reason=_stop(choice.finish_reason, calls), usage=to_usage(completion.usage),
                          model=str(completion.model or self.model))

    def _assemble(self, chunks: Iterable[Any], on_text: Callable[[str], None] | None) -> ModelReply:
        text: list[str] = []
        calls: dict[int, list[str]] = {}  # index -> [id, name, arguments]
        usage = Usage()
        model = self.model
        finish: str | None = None
        seen = False
        for chunk in chunks:
            seen = True
            model = str(chunk.model or model)
            if chunk.usage is not None:
                usage = to_usage(chunk.usage)
            for choice in chunk.choices or []:
                if choice.index not in (0, None):
                    continue
                delta = choice.delta
                if delta is not None and delta.content:
                    text.append(delta.content)
                    if on_text is not None:
                        try:
                            on_text(delta.content)
                        except Exception as e:
                            raise _CallbackError(e) from e
                for tc in (delta.tool_calls if delta is not None else None) or []:
                    slot = calls.setdefault(tc.index if tc.index is not None else len(calls), ["", "", ""])
                    slot[0] = slot[0] or (tc.id or "")
                    if tc.function is not None:
                        slot[1] = slot[1] or (tc.function.name or "")
                        slot[2] += tc.function.arguments or ""
                if choice.finish_reason:
                    finish = choice.finish_reason
        if not seen:
            raise BackendError("bad_response", "the chat-completions stream carried no chunk")
        if finish is None:
            raise TransientError("connection", "the chat-completions stream ended before a finish_reason")
        tool_calls = [ToolCall(id=cid or f"call_{i}", name=name, arguments=parse_arguments(args))
                      for i, (cid, name, args) in sorted(calls.items())]
        return ModelReply(text="".join(text), tool_calls=tool_calls, stop_reason=_stop(finish, tool_calls),
                          usage=usage, model=model)


# conversion --------------------------------------------------------------------------------------

def to_openai_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    """System prompt + protocol messages -> chat-completions ``messages``."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if m.role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": m.text or None}
            if m.tool_calls:
                msg["tool_calls"] = [{"id": c.id, "type": "function",
                                      "function": {"name": c.name, "arguments": _arguments_text(c.arguments)}}
                                     for c in m.tool_calls]
            elif not m.text:
                msg["content"] = ""
            out.append(msg)
            continue
        for r in m.tool_results:  # must directly follow the assistant turn that made the calls
            out.append({"role": "tool", "tool_call_id": r.call_id,
                        "content": (ERROR_PREFIX + r.content) if r.is_error else r.content})
        if m.text or not m.tool_results:
            out.append({"role": "user", "content": m.text})
    return out


def to_openai_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": t.input_schema}} for t in tools]


def _arguments_text(arguments: dict[str, Any]) -> str:
    """Arguments as the model sent them: a ``{"_raw": text}`` placeholder goes back verbatim."""
    if set(arguments) == {"_raw"} and isinstance(arguments["_raw"], str):
        return arguments["_raw"]
    return json.dumps(arguments)


def _stop(finish: str | None, calls: list[ToolCall]) -> StopReason:
    if calls:  # some servers say "stop" after tool calls
        return "tool_use"
    return _FINISH.get(finish or "", "other")


def to_usage(u: Any) -> Usage:
    """OpenAI counts cached prompt tokens inside ``prompt_tokens``; ours keeps them apart."""
    if u is None:
        return Usage()
    details = getattr(u, "prompt_tokens_details", None)
    cached = (getattr(details, "cached_tokens", None) or 0) if details is not None else 0
    prompt = u.prompt_tokens or 0
    return Usage(input_tokens=max(prompt - cached, 0), output_tokens=u.completion_tokens or 0,
                 cache_read_tokens=cached)


# errors ------------------------------------------------------------------------------------------

def map_error(e: Exception) -> BackendError:
    """An SDK exception -> ``BackendError`` (``TransientError`` for the retryable kinds)."""
    if isinstance(e, openai.APIStatusError):
        return _status_error(e)
    if isinstance(e, openai.APITimeoutError):
        return TransientError("timeout", f"chat-completions endpoint timed out: {_why(e)}")
    if isinstance(e, openai.APIConnectionError):
        return TransientError("connection", f"connection to the chat-completions endpoint failed: {_why(e)}")
    if isinstance(e, openai.APIResponseValidationError):
        return BackendError("bad_response", f"malformed chat-completions response: {e}")
    if isinstance(e, openai.APIError):  # an error object inside a stream
        code = (e.body or {}).get("code") if isinstance(e.body, dict) else None
        if isinstance(code, int) and 400 <= code < 500 and code not in (408, 429):
            return BackendError("bad_request", f"chat-completions stream error: {e.message}", status=code)
        return TransientError("server", f"chat-completions stream error: {e.message}")
    return BackendError("bad_response", f"malformed chat-completions response: {type(e).__name__}: {e}")


def _why(e: BaseException) -> str:
    """The SDK's connection errors say only "Connection error."; the transport's reason is the cause."""
    return f"{e} ({e.__cause__})" if e.__cause__ is not None else str(e)


def _status_error(e: openai.APIStatusError) -> BackendError:
    status = e.status_code
    detail = e.message
    retry_after = parse_retry_after(e.response.headers if e.response is not None else None)
    code = getattr(e, "code", None)
    kind: ErrorKind
    if status in (401, 403):
        return BackendError("auth", f"chat-completions endpoint refused the credentials ({status}): {detail}",
                            status=status)
    if status == 429 and code == "insufficient_quota":  # billing, not load: waiting does not help
        return BackendError("rate_limit", f"quota exhausted (429): {detail}", status=status)
    if status == 429:
        kind = "rate_limit"
    elif status in (503, 529):
        kind = "overloaded"
    elif status == 408:
        kind = "timeout"
    elif status >= 500 or status == 409:
        kind = "server"
    else:
        return BackendError("bad_request", f"chat-completions endpoint rejected the request ({status}): {detail}",
                            status=status)
    return TransientError(kind, f"chat-completions endpoint error ({status}): {detail}", status, retry_after)
