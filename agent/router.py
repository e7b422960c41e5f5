"""The model router: which backend answers the next turn, and when to escalate (Kernel Forge).

Tiers are tried in order, e.g. ``rules`` (offline, free) → a self-hosted fine-tune → Claude. The run
starts on the first tier; the router escalates to the next tier when the current one gives up (ends
a turn without a tool call twice), fails ``escalate_after`` verifications in a row without
progress, or errors out (auth, unavailable). Every switch carries a human-readable reason that the
editor shows and the trajectory records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .protocol import ModelBackend

ESCALATE_AFTER = 2  # failed verifies in a row on one tier before escalating: Kernel Forge escalates after 2


@dataclass
class Router:
    tiers: list[ModelBackend]
    escalate_after: int = ESCALATE_AFTER
    index: int = 0
    failures: int = 0
    reasons: list[str] = field(default_factory=list)

    @property
    def current(self) -> ModelBackend:
        return self.tiers[self.index]

    @property
    def label(self) -> str:
        b = self.current
        return b.name if b.name == b.model else f"{b.name}:{b.model}"

    def escalate(self, why: str) -> str | None:
        """Move to the next tier; the reason shown to the user, or None when there is no next tier."""
        if self.index + 1 >= len(self.tiers):
            return None
        old = self.label
        self.index += 1
        self.failures = 0
        reason = f"{old} → {self.label}: {why}"
        self.reasons.append(reason)
        return reason

    def record_verify(self, verified: bool, progressed: bool) -> str | None:
        """After a verification: escalate when this tier keeps failing without progress."""
        if verified or progressed:
            self.failures = 0
            return None
        self.failures += 1
        if self.failures >= self.escalate_after:
            return self.escalate(f"{self.failures} failed verifications in a row without progress")
        return None
