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
verdict the file cannot touch needs a task (``nki-agent verify``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # no pydantic at import time (the worker imports this package)
    from nki_agent.toolchain.protocol.jobs import SimulateResult

SELF_REPORTED = "self-reported by the file"


def claim(res: SimulateResult, main_checks: bool = True) -> str:
    """The claim of ``res`` (a task-less ``SimulateResult`` that ran with no error): "its checks pass —
    self-reported by the file", "the test's worker reported a pass — self-reported by the file (the test
    imports it)", ...; "" for any other ``via``. ``main_checks``: whether the driver checks anything itself."""
    what = {"main": "its checks pass" if main_checks else "it ran to the end (it checks nothing)",
            "test": "the test's worker reported a pass", "shapes": "nothing to compare with"}.get(res.via, "")
    if not what or not res.self_reported:
        return what
    return f"{what} — {SELF_REPORTED}" + (" (the test imports it)" if res.via == "test" else "")


__all__ = ["SELF_REPORTED", "claim"]
