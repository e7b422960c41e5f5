"""neuronx-cc backend errors: structured codes, driver crash envelopes and the ICE banner.

- New style: ``[INTERNAL_ERROR] [NCC_I<CAT><NNN>] cause`` / ``[ERROR] [NCC_E<CAT><NNN>] cause - resolution``
  (also ``[NCC_X]`` alone, or written out as ``INTERNAL_ERROR NCC_X: ...``); the message may span lines.
- Old style: ``[TEN404] (hlo-op) message - Please open a support ticket ...`` (may span lines until the
  ticket sentence, e.g. GCA035's per-tensor byte table).
- ``[F134]`` / ``[F137]`` / ``[F139]``: the driver's crash envelope; the real cause usually precedes it.
- The Internal Compiler Error banner (``An Internal Compiler Error has occurred``).
These carry no kernel line; the tensor names they mention are kept so the caller can find them.
"""

from __future__ import annotations

import re

from .common import Finding
from .messages import hint

_NEW = re.compile(r"(?:\[?(?P<sev>INTERNAL_ERROR|ERROR|WARNING)\]?\s*)?\[?\b(?P<code>NCC_[A-Z]{2,6}\d{3})\b\]?:?\s*"
                  r"(?P<msg>.*)$")
_OLD = re.compile(r"\[(?P<code>[A-Z]{3}\d{3})\]\s+(?:\((?P<op>[^)]{1,200})\)\s+)?(?P<msg>.*)$")
_F = re.compile(r"\[(?P<code>F13[479])\]\s*(?P<msg>.*)$")
_TICKET = re.compile(r"\s*-?\s*Please open a support ticket.*$", re.IGNORECASE)
_INST = re.compile(r"\bInstruction (?P<op>\w{1,60}) (?P<inst>inst\.\d{1,9}): (?P<msg>.+)$")
_ICE = "An Internal Compiler Error has occurred"
_LOGLINE = re.compile(r"\b(?:FATAL|ERROR)\s+\d+\s+(?:\d+\s+)?(?:\(\w+\)\s+)?\[[^\]]{1,200}\]:\s*(?P<msg>.+)$")
# Lines that start a new record (stop collecting a multi-line message there).
_RECORD = re.compile(r"^(\[|Traceback|Exit:|\d{4}-\d\d-\d\d|[\w.]*(Error|Exception):|File \"|neuronx-cc )")

# Tensor names in backend messages: DebugInfo <name||...>, {name_subN}@SB, GCA035 "name.48_i0: N Bytes", %'name'.
_T_DEBUG = re.compile(r"DebugInfo:\s*<(?P<n>[A-Za-z_]\w{0,100})\|\|")
_T_ALLOC = re.compile(r"\{(?P<n>[A-Za-z_]\w{0,100}?)(?:_sub\d+)?\}@")
_T_BYTES = re.compile(r"^\s*(?P<n>[A-Za-z_]\w{0,100}?)(?:\.\d+)?_i\d+:\s*(?P<b>\d+) Bytes per Partition")
_T_QUOTED = re.compile(r"%'(?P<n>[A-Za-z_]\w{0,100})'")


def _tensors(text: str) -> tuple[str, ...]:
    """Tensor names, largest per-partition footprint first (GCA035), else in order of appearance."""
    weighted: dict[str, int] = {}
    for ln in text.splitlines():
        m = _T_BYTES.match(ln)
        if m:
            weighted[m["n"]] = max(weighted.get(m["n"], 0), int(m["b"]))
    names = sorted(weighted, key=lambda n: -weighted[n])
    for pat in (_T_DEBUG, _T_ALLOC, _T_QUOTED):
        names += [m["n"] for m in pat.finditer(text)]
    seen: list[str] = []
    for n in names:
        if n not in seen and not n.startswith("scratch_"):
            seen.append(n)
    return tuple(seen)


def _collect(lines: list[str], i: int, first: str, until_ticket: bool) -> str:
    """The message starting at line i: continuation lines up to the ticket sentence or the next record."""
    parts = [first.strip()]
    j = i
    limit = 25 if until_ticket else 6
    while j + 1 < len(lines) and len(parts) < limit and not _TICKET.search(parts[-1]):
        nxt = lines[j + 1].strip()
        if not nxt or nxt.startswith("...") or _RECORD.match(nxt):
            break
        parts.append(nxt)
        j += 1
    if until_ticket and not any(_TICKET.search(p) for p in parts):
        parts = parts[:1]
    return _TICKET.sub("", "\n".join(parts)).strip()


def parse(lines: list[str], known: frozenset[str]) -> list[Finding]:
    out: list[Finding] = []
    for i, ln in enumerate(lines):
        if "NCC_" in ln and (m := _NEW.search(ln)):
            msg = _collect(lines, i, m["msg"], until_ticket=False)
            res = ""
            if m["sev"] == "ERROR" and " - " in msg:
                msg, res = msg.split(" - ", 1)
            h = "; ".join(x for x in (res.strip(), hint(msg)) if x)
            out.append(Finding(m["code"], msg or m["code"], i, "neuronx-cc", tensors=_tensors(msg), hint=h))
        elif "[F13" in ln and (f := _F.search(ln)):
            msg = _TICKET.sub("", f["msg"]).strip()
            out.append(Finding(f["code"], msg or "neuronx-cc terminated abnormally", i, "neuronx-cc", envelope=3))
        elif "[" in ln and (o := _OLD.search(ln)) and (o["code"] in known or "support ticket" in ln
                                                         or "nternal" in o["msg"] or "Unhandled" in o["msg"]):
            msg = _collect(lines, i, o["msg"], until_ticket=True)
            if o["op"]:
                msg = f"{msg} (HLO op {o['op']})"
            out.append(Finding(o["code"], msg, i, "neuronx-cc", tensors=_tensors(msg), hint=hint(msg)))
        elif "inst." in ln and (b := _INST.search(ln)):
            code = "log_dma_shape_mismatch" if "DMA" in b["op"] + b["msg"] and "shape" in b["msg"] else "log_backend_verifier"
            out.append(Finding(code, f"{b['op']} {b['inst']}: {b['msg'].strip()}", i, "neuronx-cc"))
        elif _ICE in ln:
            out.append(Finding("log_internal_compiler_error", _ice_message(lines, i), i, "neuronx-cc", envelope=2))
    return out


def _ice_message(lines: list[str], i: int) -> str:
    for ln in lines[i + 1:i + 30]:
        if "Error message:" in ln:
            return ln.split("Error message:", 1)[1].strip() or "internal compiler error"
    for ln in reversed(lines[max(0, i - 6):i]):
        m = _LOGLINE.search(ln)
        if m and not m["msg"].strip().startswith("*"):
            return f"internal compiler error: {m['msg'].strip()}"
    return "internal compiler error"
