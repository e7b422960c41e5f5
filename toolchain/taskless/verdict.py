"""What a task-less run that ended without an error may claim, and whose word it is (the code lens and
``nki-agent simulate`` say it the same way: ``claim``).

Every task-less result comes from a worker in which the file's own code ran — its ``__main__`` driver, the
pytest test (which imports the file, so the file's import-time code and its kernel run in the test's process),
or the module of its shape lines — so whatever the reply says, the file could have written: it is
``SimulateResult.self_reported`` and labelled ``SELF_REPORTED``. What ran (``via``, ``via_test``) is the
parent's word (``plan.stamp``): a test's outcome is only ever reported by the worker that was asked to run that
test, never by the process of the file's driver; and even that worker cannot vouch for a pass (the file's
import-time code and its kernel ran in it, and may have patched the checks or forged the reply), so "the
test passes" is never said as a fact: "the test's worker reported a pass — self-reported by the file". A
verdict the file cannot touch needs a task (``nki-agent verify``).

A driver that launched the kernel but compares nothing (``source.main_checks``) gets no ✓: its glyph is the
neutral ``UNCHECKED`` and its claim "ran, nothing checked" (``glyph``). A run a limit of the simulator cut off
after a launch completed (``run.cut_off``: an information note at the driver's line) says where, and which
limit, after its claim."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # no pydantic at import time (the worker imports this package)
    from nki_agent.toolchain.protocol.jobs import SimulateResult

SELF_REPORTED = "self-reported by the file"
CHECKED, UNCHECKED = "✓", "○"  # a clean run that compared something / one that compared nothing
NOTHING_CHECKED = "ran, nothing checked"


def glyph(res: SimulateResult, main_checks: bool = True) -> str:
    """The lens's glyph of a clean task-less run: ✓ only when something was compared (the driver's checks, the
    test); a ``__main__`` driver that checks nothing gets the neutral ``UNCHECKED``."""
    return UNCHECKED if res.via == "main" and not main_checks else CHECKED


def cut_off(res: SimulateResult) -> str:
    """" (cut off at line 27 by the simulator's memory limit)" when a limit of the tool stopped the run after a
    launch completed (an information problem with a ``TOOL_LIMITS`` code, ``run.cut_off``); "" otherwise."""
    from nki_agent.toolchain.facts.errors import TOOL_LIMITS

    for p in res.problems:
        if p.code in TOOL_LIMITS and p.severity == "info":
            at = f" at line {p.location.line}" if p.location is not None else ""
            return f" (cut off{at} by {TOOL_LIMITS[p.code]})"
    return ""


def claim(res: SimulateResult, main_checks: bool = True) -> str:
    """The claim of ``res`` (a task-less ``SimulateResult`` that ran with no error): "its checks pass —
    self-reported by the file", "ran, nothing checked — ...", "the test's worker reported a pass — self-reported by the file (the test
    imports it)", ...; "" for any other ``via``. ``main_checks``: whether the driver checks anything itself."""
    what = {"main": "its checks pass" if main_checks else NOTHING_CHECKED,
            "test": "the test's worker reported a pass", "shapes": "nothing to compare with"}.get(res.via, "")
    what = what and what + cut_off(res)
    if not what or not res.self_reported:
        return what
    return f"{what} — {SELF_REPORTED}" + (" (the test imports it)" if res.via == "test" else "")


__all__ = ["CHECKED", "NOTHING_CHECKED", "SELF_REPORTED", "UNCHECKED", "claim", "cut_off", "glyph"]
