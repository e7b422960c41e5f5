"""Neuron runtime (NRT) errors seen when a compiled kernel runs on the device.

``NRT Error NRT_EXEC_OOB(1006): ...``, ``NrtError: NRT_FAILURE(6)``, ``Failure: NRT_RESOURCE in ...``,
the DGE ``failed to run scatter/gather ... out-of-bound access`` notification (status 1006), and
``[NRT] Failed to load NEFF``. They have no kernel line: the caller attaches them to the kernel.
"""

from __future__ import annotations

import re

from .common import Finding

_STATUS = re.compile(r"\b(?P<code>NRT_[A-Z][A-Z_]{2,40})\b(?:\((?P<n>\d{1,5})\))?")
_OOB = re.compile(r"failed to run scatter/gather.{0,120}?out-of-bound access", re.IGNORECASE)
_LOAD = re.compile(r"\[NRT\]\s*Failed to load NEFF:?\s*(?P<msg>.*)$", re.IGNORECASE)
# Numeric status -> name for lines that only give the number ("with status 1006").
_NUMBERS = {"1006": "NRT_EXEC_OOB", "1002": "NRT_EXEC_BAD_INPUT", "1003": "NRT_EXEC_COMPLETED_WITH_NUM_ERR",
            "1004": "NRT_EXEC_COMPLETED_WITH_ERR"}
_WITH_STATUS = re.compile(r"with status (?P<n>\d{3,5})\b")


def parse(lines: list[str], known: frozenset[str]) -> list[Finding]:
    out: list[Finding] = []
    for i, ln in enumerate(lines):
        if "NRT" not in ln and "scatter/gather" not in ln and "with status" not in ln:
            continue
        msg = ln.strip()
        if (m := _OOB.search(ln)) is not None:
            out.append(Finding("NRT_EXEC_OOB", m.group(0), i, "neuron-runtime",
                               hint="check the values of the indirect (dynamic) indices; oob_mode can skip instead"))
        elif (ld := _LOAD.search(ln)) is not None:
            out.append(Finding("log_neff_load_failed", f"failed to load NEFF: {ld['msg'].strip()}".rstrip(": "), i,
                               "neuron-runtime"))
        elif (s := _STATUS.search(ln)) is not None and s["code"] in known:
            out.append(Finding(s["code"], msg, i, "neuron-runtime"))
        elif (w := _WITH_STATUS.search(ln)) is not None and w["n"] in _NUMBERS:
            out.append(Finding(_NUMBERS[w["n"]], msg, i, "neuron-runtime", envelope=1))
    return out
