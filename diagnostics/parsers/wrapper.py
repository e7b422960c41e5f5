"""Framework wrapper and launcher lines that only say "neuronx-cc failed" (torch-neuronx, NxDI, nki.baremetal).

``... ERROR ||NEURON_CC_WRAPPER||: Failed compilation with [...]``, ``[ERROR]: Failed compilation with``,
``neuronx-cc returned non-zero exit status 70``, ``compilation failed with 70``, and the classic
``RuntimeError: Compilation failed for <kernel> with error Command '['neuronx-cc', ...``. They are
envelopes: shown only when the output holds nothing more specific.
"""

from __future__ import annotations

import re

from .common import Finding

_FAILED = re.compile(r"Failed compilation with|returned non-zero exit status (?P<s>-?\d+)|compilation failed with "
                     r"(?P<s2>-?\d+)|Compilation failed for (?P<k>\w+) with error|neuronx-cc failed with (?P<s3>-?\d+)",
                     re.IGNORECASE)
_CMD = re.compile(r"\[\s*'neuronx-cc',\s*'compile'.{0,300}")


def parse(lines: list[str], known: frozenset[str]) -> list[Finding]:
    out: list[Finding] = []
    for i, ln in enumerate(lines):
        if "ompil" not in ln and "exit status" not in ln and "failed with" not in ln:
            continue
        m = _FAILED.search(ln)
        if not m:
            continue
        status = m["s"] or m["s2"] or m["s3"]
        what = f"neuronx-cc failed (exit status {status})" if status else "neuronx-cc compilation failed"
        if m["k"]:
            what += f" for kernel {m['k']}"
        cmd = _CMD.search(ln)
        if cmd:
            what += f"; command {cmd.group(0)[:200]}"
        out.append(Finding("log_compile_failed", what, i, "neuronx-cc", function=m["k"], envelope=1))
    return out
