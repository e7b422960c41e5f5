"""Budgets of one agent run (turns, tokens, dollars, wall time) and the price table behind dollars.

A run stops at the first verified kernel or when any budget is spent; ``Budget.exceeded`` names the
budget that ran out, so the summary can say why the agent stopped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .protocol import Usage

# US$ per million tokens: (input, output, cache read, cache write). Published list prices; a model
# not listed is priced at the most expensive row so a budget in dollars is never under-counted.
PRICES: dict[str, tuple[float, float, float, float]] = {
    "claude-opus-4": (15.0, 75.0, 1.5, 18.75),
    "claude-opus-4-1": (15.0, 75.0, 1.5, 18.75),
    "claude-opus-4-5": (5.0, 25.0, 0.5, 6.25),
    "claude-sonnet-4": (3.0, 15.0, 0.3, 3.75),
    "claude-sonnet-4-5": (3.0, 15.0, 0.3, 3.75),
    "claude-haiku-4-5": (1.0, 5.0, 0.1, 1.25),
    "gpt-4.1": (2.0, 8.0, 0.5, 2.0),
}
FREE_BACKENDS = ("rules", "openai")  # offline rules cost nothing; self-hosted endpoints bill no tokens
_WORST = max(PRICES.values())


def price(model: str, backend: str, usage: Usage) -> float:
    """Dollar cost of ``usage`` on ``model``; longest matching price-table prefix wins."""
    if backend in FREE_BACKENDS and not any(model.startswith(k) for k in PRICES):
        return 0.0
    key = max((k for k in PRICES if model.startswith(k)), key=len, default=None)
    pin, pout, pread, pwrite = PRICES[key] if key else _WORST
    return (usage.input_tokens * pin + usage.output_tokens * pout + usage.cache_read_tokens * pread
            + usage.cache_write_tokens * pwrite) / 1e6


@dataclass
class Budget:
    """Limits of one run; 0 means unlimited (except turns)."""

    max_turns: int = 10  # Kernel Forge's cap: the paper's runs converge within 10 model turns
    max_tokens: int = 400_000  # ~10 turns of a 30k-token conversation plus replies
    max_dollars: float = 5.0  # a generous ceiling for one kernel with a frontier model
    max_seconds: float = 900.0  # 15 min: a run that long has stopped converging
    turns: int = 0
    usage: Usage = field(default_factory=Usage)
    dollars: float = 0.0
    started: float = field(default_factory=time.monotonic)

    def charge(self, model: str, backend: str, usage: Usage) -> None:
        self.usage.add(usage)
        self.dollars += price(model, backend, usage)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def exceeded(self) -> str | None:
        """The name of the first spent budget, or None."""
        if self.turns >= self.max_turns:
            return f"turn budget ({self.max_turns} turns)"
        if self.max_tokens and self.usage.total >= self.max_tokens:
            return f"token budget ({self.max_tokens} tokens)"
        if self.max_dollars and self.dollars >= self.max_dollars:
            return f"cost budget (${self.max_dollars:.2f})"
        if self.max_seconds and self.elapsed >= self.max_seconds:
            return f"time budget ({self.max_seconds:g} s)"
        return None
