"""The Claude backend: one ``ModelRequest`` -> one Anthropic Messages API call with tool use.

Owns the conversion between protocol messages and Anthropic content blocks (assistant ``text`` +
``tool_use`` blocks; user ``tool_result`` blocks, with ``is_error``, before any text), prompt-caching
breakpoints, streaming (text deltas to ``on_text``, tool input reassembled from ``input_json_delta``),
and the mapping of SDK / transport failures to ``BackendError`` kinds. Retries are ours (SDK
``max_retries=0``) so the count reaches ``ModelReply.retries``; see ``_retry``.

The key comes from the ``api_key`` argument or the ``ANTHROPIC_API_KEY`` environment variable,
nothing else (it is always passed explicitly, so the SDK never looks for profiles or tokens).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

import anthropic
import httpx2  # the transport under anthropic 2.x; a stream cut mid-body raises its errors unwrapped

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

# The model of Kernel Forge's recorded NKIGen-Bench run (prior-art §1.3: opus48), the closest
# published evidence of a Claude model driving an NKI compile -> verify -> fix loop.
DEFAULT_MODEL = "claude-opus-4-8"
KEY_ENV = "ANTHROPIC_API_KEY"  # the only place besides the argument a key is read from
CACHE_CONTROL = {"type": "ephemeral"}  # 5-minute cache: the loop's next turn comes well within that
EMPTY_TEXT = "(empty)"  # the API rejects empty text blocks; an empty turn is sent as this

_STOP: dict[str, StopReason] = {"end_turn": "end_turn", "stop_sequence": "end_turn", "tool_use": "tool_use",
                                "max_tokens": "max_tokens", "refusal": "refusal"}
_ERROR_TYPES: dict[str, ErrorKind] = {  # error.type of a mid-stream error event -> our kind
    "overloaded_error": "overloaded", "rate_limit_error": "rate_limit", "api_error": "server",
    "timeout_error": "timeout", "invalid_request_error": "bad_request", "request_too_large": "bad_request",
    "not_found_error": "bad_request", "authentication_error": "auth", "permission_error": "auth",
}


class _CallbackError(Exception):
    """An exception of the caller's ``on_text``: re-raised as is, never mapped to a backend error."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


class AnthropicBackend:
    """``ModelBackend`` over the Anthropic Messages API (``name`` "anthropic")."""

    name = "anthropic"

    def __init__(self, model: str = DEFAULT_MODEL, api_key: str | None = None, base_url: str | None = None,
                 max_retries: int = 4, timeout: float = 120.0, backoff: float = 1.0,
                 prompt_caching: bool = True):
        self.model = model
        self.base_url = base_url
        self.max_retries = max_retries
        self.timeout = timeout
        self.backoff = backoff
        self.prompt_caching = prompt_caching
        self._api_key = api_key
        self._client: anthropic.Anthropic | None = None
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
        """The Messages API request body (without ``stream``) for ``request``."""
        cache = self.prompt_caching
        params: dict[str, Any] = {"model": self.model, "max_tokens": request.max_tokens,
                                  "messages": to_anthropic_messages(request.messages, cache)}
        if request.system:
            block: dict[str, Any] = {"type": "text", "text": request.system}
            if cache:
                block["cache_control"] = dict(CACHE_CONTROL)
            params["system"] = [block]
        if request.tools:
            params["tools"] = to_anthropic_tools(request.tools, cache)
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
    def _get_client(self) -> anthropic.Anthropic:
        with self._lock:
            if self._client is None:
                key = self._api_key or os.environ.get(KEY_ENV) or None
                if not key:
                    raise BackendError("auth", f"no Anthropic API key: pass api_key or set {KEY_ENV}")
                self._client = anthropic.Anthropic(api_key=key, base_url=self.base_url, max_retries=0,
                                                   timeout=self.timeout)
            return self._client

    def _attempt(self, client: anthropic.Anthropic, params: dict[str, Any], request: ModelRequest) -> ModelReply:
        try:
            if request.stream:
                events = pump(lambda: client.messages.create(**params, stream=True), request.cancel)
                return self._assemble(events, request.on_text)
            (message,) = pump(lambda: [client.messages.create(**params)], request.cancel)
            return self._from_message(message)
        except _CallbackError as e:
            raise e.error from None
        except BackendError:
            raise
        except Exception as e:
            raise map_error(e) from e

    def _from_message(self, message: Any) -> ModelReply:
        text: list[str] = []
        calls: list[ToolCall] = []
        for block in message.content:
            if block.type == "text":
                text.append(block.text)
            elif block.type == "tool_use":
                args = block.input if isinstance(block.input, dict) else {"_raw": json.dumps(block.input)}
                calls.append(ToolCall(id=str(block.id), name=str(block.name), arguments=args))
        return ModelReply(text="".join(text), tool_calls=calls, stop_reason=_STOP.get(message.stop_reason, "other"),
                          usage=to_usage(message.usage), model=str(message.model or self.model))

    def _assemble(self, events: Iterable[Any], on_text: Callable[[str], None] | None) -> ModelReply:
        text: list[str] = []
        tools: dict[int, tuple[str, str, list[str]]] = {}  # block index -> (id, name, json pieces)
        usage = Usage()
        model = self.model
        stop: str | None = None
        started = stopped = False
        for ev in events:
            kind = ev.type
            if kind == "message_start":
                started = True
                model = str(ev.message.model or model)
                usage = to_usage(ev.message.usage)
            elif kind == "content_block_start":
                block = ev.content_block
                if block.type == "tool_use":
                    tools[ev.index] = (str(block.id), str(block.name), [])
                elif block.type == "text" and block.text:
                    text.append(block.text)
            elif kind == "content_block_delta":
                delta = ev.delta
                if delta.type == "text_delta":
                    text.append(delta.text)
                    if on_text is not None:
                        try:
                            on_text(delta.text)
                        except Exception as e:
                            raise _CallbackError(e) from e
                elif delta.type == "input_json_delta":
                    tools[ev.index][2].append(delta.partial_json)
            elif kind == "message_delta":
                stop = ev.delta.stop_reason
                _merge_usage(usage, ev.usage)
            elif kind == "message_stop":
                stopped = True
        if not started:
            raise BackendError("bad_response", "the Anthropic stream carried no message_start event")
        if not stopped:
            raise TransientError("connection", "the Anthropic stream ended before message_stop")
        calls = [ToolCall(id=i, name=n, arguments=parse_arguments("".join(parts)))
                 for _, (i, n, parts) in sorted(tools.items())]
        return ModelReply(text="".join(text), tool_calls=calls, stop_reason=_STOP.get(stop or "", "other"),
                          usage=usage, model=model)


# conversion --------------------------------------------------------------------------------------

def to_anthropic_messages(messages: list[Message], cache: bool = False) -> list[dict[str, Any]]:
    """Protocol messages -> Messages API ``messages`` (a cache breakpoint on the very last block if
    ``cache``, so the next turn reads the whole conversation so far from the cache)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        content: list[dict[str, Any]] = []
        if m.role == "assistant":
            if m.text:
                content.append({"type": "text", "text": m.text})
            content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in m.tool_calls]
        else:  # tool results must come first in a user turn
            content += [{"type": "tool_result", "tool_use_id": r.call_id, "content": r.content or EMPTY_TEXT,
                         "is_error": r.is_error} for r in m.tool_results]
            if m.text:
                content.append({"type": "text", "text": m.text})
        if not content:
            content.append({"type": "text", "text": EMPTY_TEXT})
        out.append({"role": m.role, "content": content})
    if cache and out:
        out[-1]["content"][-1]["cache_control"] = dict(CACHE_CONTROL)
    return out


def to_anthropic_tools(tools: list[ToolSpec], cache: bool = False) -> list[dict[str, Any]]:
    """Tool specs -> Messages API ``tools`` (a cache breakpoint on the last one if ``cache``)."""
    out: list[dict[str, Any]] = [{"name": t.name, "description": t.description, "input_schema": t.input_schema}
                                 for t in tools]
    if cache and out:
        out[-1]["cache_control"] = dict(CACHE_CONTROL)
    return out


def to_usage(u: Any) -> Usage:
    if u is None:
        return Usage()
    return Usage(input_tokens=u.input_tokens or 0, output_tokens=u.output_tokens or 0,
                 cache_read_tokens=getattr(u, "cache_read_input_tokens", None) or 0,
                 cache_write_tokens=getattr(u, "cache_creation_input_tokens", None) or 0)


def _merge_usage(usage: Usage, delta: Any) -> None:
    """``message_delta`` usage is cumulative: its counts replace the ones from ``message_start``."""
    if delta is None:
        return
    for ours, theirs in (("output_tokens", "output_tokens"), ("input_tokens", "input_tokens"),
                         ("cache_read_tokens", "cache_read_input_tokens"),
                         ("cache_write_tokens", "cache_creation_input_tokens")):
        value = getattr(delta, theirs, None)
        if isinstance(value, int):
            setattr(usage, ours, value)


# errors ------------------------------------------------------------------------------------------

def map_error(e: Exception) -> BackendError:
    """An SDK or transport exception -> ``BackendError`` (``TransientError`` for the retryable kinds)."""
    if isinstance(e, anthropic.APIStatusError):
        return _status_error(e)
    if isinstance(e, (anthropic.APITimeoutError, httpx2.TimeoutException)):
        return TransientError("timeout", f"Anthropic API timed out: {e}")
    if isinstance(e, (anthropic.APIConnectionError, httpx2.TransportError)):
        return TransientError("connection", f"connection to the Anthropic API failed: {e}")
    if isinstance(e, (anthropic.APIResponseValidationError, ValueError, TypeError, KeyError, AttributeError,
                      IndexError, httpx2.DecodingError, anthropic.APIError)):
        return BackendError("bad_response", f"malformed Anthropic API response: {type(e).__name__}: {e}")
    return BackendError("bad_response", f"unexpected failure of the Anthropic API call: {type(e).__name__}: {e}")


def _status_error(e: anthropic.APIStatusError) -> BackendError:
    status = e.status_code
    detail = getattr(e, "api_message", None) or str(e)
    retry_after = parse_retry_after(e.response.headers if e.response is not None else None)
    if status < 400:  # an error event inside a 200 stream: classify by its error.type
        kind = _ERROR_TYPES.get(str(getattr(e, "type", None) or ""), "server")
        if kind in ("auth", "bad_request"):
            return BackendError(kind, f"Anthropic API stream error: {detail}", status=status)
        return TransientError(kind, f"Anthropic API stream error: {detail}", status, retry_after)
    if status in (401, 403):
        return BackendError("auth", f"Anthropic API refused the credentials ({status}): {detail}", status=status)
    if status == 429:
        return TransientError("rate_limit", f"Anthropic API rate limit (429): {detail}", status, retry_after)
    if status == 529 or getattr(e, "type", None) == "overloaded_error":
        return TransientError("overloaded", f"Anthropic API overloaded ({status}): {detail}", status, retry_after)
    if status == 408:
        return TransientError("timeout", f"Anthropic API request timeout (408): {detail}", status, retry_after)
    if status >= 500 or status == 409:
        return TransientError("server", f"Anthropic API server error ({status}): {detail}", status, retry_after)
    return BackendError("bad_request", f"Anthropic API rejected the request ({status}): {detail}", status=status)
