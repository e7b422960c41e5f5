"""The one protocol every model backend speaks (Anthropic, OpenAI-compatible, offline rules).

Plain dataclasses, no SDK types: the loop (``loop.py``) builds a ``ModelRequest`` from the
conversation so far and a backend returns one ``ModelReply`` (text + tool calls + token usage).
Backends raise ``BackendError`` with a ``kind``; the loop decides what a kind means for the run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Role = Literal["user", "assistant"]
StopReason = Literal["end_turn", "tool_use", "max_tokens", "refusal", "other"]
ErrorKind = Literal["auth", "rate_limit", "overloaded", "server", "connection", "timeout", "bad_request",
                    "bad_response", "cancelled", "unavailable"]


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call: name, what it does, JSON schema of its input."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One tool call made by the model (``id`` echoes back in the matching ``ToolResult``)."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    content: str
    is_error: bool = False


@dataclass
class Message:
    """One conversation turn. Assistant turns carry text and tool calls; user turns text and tool results."""

    role: Role
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_results: list[ToolResult] = field(default_factory=list)


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens


@dataclass
class Workspace:
    """What the loop knows about the current candidate; only the offline ``rules`` backend reads it
    (LLM backends see the same facts as text in the messages)."""

    code: str
    path: str
    task: str
    diagnostics: list[Any] = field(default_factory=list)  # diagnostics.model.Diagnostic of the last compile/verify
    verified: bool = False
    target: str | None = None
    sdk_generation: str = ""  # "new" when the installed SDK rejects classic kernels
    original: str = ""  # the user's kernel, and what the first verification found in it
    original_diagnostics: list[Any] = field(default_factory=list)


@dataclass
class ModelRequest:
    system: str
    messages: list[Message]
    tools: list[ToolSpec]
    max_tokens: int = 8192
    temperature: float | None = None
    stream: bool = True
    on_text: Callable[[str], None] | None = None  # streamed text deltas, for progress
    cancel: threading.Event | None = None  # set -> the backend stops as soon as it can (BackendError "cancelled")
    workspace: Workspace | None = None


@dataclass
class ModelReply:
    text: str
    tool_calls: list[ToolCall]
    stop_reason: StopReason
    usage: Usage
    model: str
    retries: int = 0  # transient failures retried inside the backend before this reply


class BackendError(Exception):
    """A backend failure the loop can act on (``retryable`` kinds were already retried by the backend)."""

    def __init__(self, kind: ErrorKind, message: str, status: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retryable = retryable


class ModelBackend(Protocol):
    """``name`` is the backend family ("anthropic", "openai", "rules"); ``model`` the model id."""

    name: str
    model: str

    def complete(self, request: ModelRequest) -> ModelReply: ...
