"""Task discovery for the server: re-exported from ``toolchain.task_discovery`` (shared with the CLI and agent)."""

from __future__ import annotations

from ..toolchain.task_discovery import SELF, TaskRef, discover

__all__ = ["SELF", "TaskRef", "discover"]
