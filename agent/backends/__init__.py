"""Model backends behind one protocol (``agent.protocol.ModelBackend``), and the tier-spec parser.

A spec names one backend: ``rules`` (offline quick fixes), ``anthropic[:MODEL][@URL]`` (Claude through
the ``anthropic`` SDK, key from ``ANTHROPIC_API_KEY``; ``@URL`` for a gateway or proxy) or ``openai:MODEL@URL`` (any OpenAI-compatible
chat-completions server, e.g. vLLM serving a fine-tuned model). A comma-separated list is a router
chain, cheapest first: ``rules,openai:qwen3-coder-nki@http://gpu-box:8000/v1,anthropic``.
"""

from __future__ import annotations

import os

from ..protocol import ModelBackend

KINDS = ("rules", "anthropic", "openai")


class SpecError(ValueError):
    """A backend spec that cannot be understood (the message says how to write one)."""


def parse_spec(spec: str, base_url: str | None = None) -> tuple[str, str, str]:
    """(kind, model, url) of one spec, without building anything; ``SpecError`` says what is wrong."""
    kind, _, rest = spec.strip().partition(":")
    if kind == "rules":
        return kind, "rules", ""
    model, _, url = rest.partition("@")
    if url and not url.startswith(("http://", "https://")):
        raise SpecError(f"{spec!r}: the URL must start with http:// or https://")
    if kind == "anthropic":
        return kind, model, url or base_url or ""
    if kind == "openai":
        url = url or base_url or os.environ.get("NKI_AGENT_OPENAI_BASE_URL", "")
        if not model or not url:
            raise SpecError(f"{spec!r}: an OpenAI-compatible backend needs a model and a URL, "
                            "e.g. openai:my-model@http://127.0.0.1:8000/v1")
        return kind, model, url
    raise SpecError(f"unknown backend {spec!r}; use one of: rules, anthropic[:MODEL][@URL], openai:MODEL@URL")


def parse_chain(specs: str) -> list[tuple[str, str, str]]:
    parts = [s for s in (x.strip() for x in specs.split(",")) if s]
    if not parts:
        raise SpecError("no backend given; use e.g. rules or rules,anthropic")
    return [parse_spec(p) for p in parts]


def make_backend(spec: str, *, base_url: str | None = None, api_key: str | None = None) -> ModelBackend:
    """One backend from its spec (``base_url`` overrides the Anthropic endpoint, e.g. a proxy)."""
    kind, model, url = parse_spec(spec, base_url)
    if kind == "rules":
        from .rules_backend import RulesBackend

        return RulesBackend()
    if kind == "anthropic":
        from .anthropic_backend import DEFAULT_MODEL, AnthropicBackend

        return AnthropicBackend(model=model or DEFAULT_MODEL, api_key=api_key, base_url=url or None)
    from .openai_backend import OpenAIBackend

    return OpenAIBackend(model=model, base_url=url, api_key=api_key)


def make_chain(specs: str, **kw: str | None) -> list[ModelBackend]:
    parse_chain(specs)
    return [make_backend(p, **kw) for p in specs.split(",") if p.strip()]


def default_chain() -> str:
    """The offline rules first; Claude after them when a key is configured."""
    return "rules,anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "rules"
