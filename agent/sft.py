"""``export-sft``: accepted trajectories → a supervised fine-tuning dataset (the paper's data flywheel).

Each run whose kernel verified AND whose edit the user accepted becomes one chat example in the
OpenAI fine-tuning format (``messages`` with ``tool_calls`` and ``tool`` results, plus ``tools``):
system prompt, task message, then the assistant turns and tool results exactly as they happened.
Runs that were refused, cancelled or never accepted are skipped and counted, and so are runs whose
verification did not run in the OS sandbox (``sandbox`` of the verdict record) unless the export
trusts this machine (``--trust-local``, and the user accepted the run with it).
"""

from __future__ import annotations

import glob
import json
import os
from collections import Counter
from typing import Any

from .loop import TRUSTED_SANDBOXES
from .tools import SPECS
from .trajectory import read


def example(records: list[dict[str, Any]], trust_local: bool = False) -> dict[str, Any] | None:
    """The chat example of one trajectory, or None when it does not qualify."""
    verdicts = [r for r in records if r["type"] == "verdict"]
    accepted = [r for r in records if r["type"] == "accepted"]
    if not verdicts or verdicts[-1].get("verdict") != "verified" or not accepted or not accepted[-1].get("accepted"):
        return None
    jailed = verdicts[-1].get("sandbox") in TRUSTED_SANDBOXES
    if not jailed and not (trust_local and accepted[-1].get("trusted")):
        return None
    messages: list[dict[str, Any]] = []
    for r in records:
        if r["type"] == "system":
            messages.append({"role": "system", "content": r["text"]})
        elif r["type"] == "user":
            messages.append({"role": "user", "content": r["text"]})
        elif r["type"] == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": r.get("text") or ""}
            calls = r.get("tool_calls") or []
            if calls:
                msg["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
                                     for c in calls]
            messages.append(msg)
        elif r["type"] == "tool" and not r.get("initial") and r.get("id") != "implicit":
            messages.append({"role": "tool", "tool_call_id": r.get("id", ""), "content": r.get("content", "")})
    if not any(m["role"] == "assistant" for m in messages):
        return None  # nothing the model did (already-correct kernels)
    tools = [{"type": "function", "function": {"name": s.name, "description": s.description,
                                               "parameters": s.input_schema}} for s in SPECS]
    return {"messages": messages, "tools": tools}


def export(directory: str, out_path: str, trust_local: bool = False) -> Counter[str]:
    """Write the dataset; returns counts of exported and skipped runs."""
    counts: Counter[str] = Counter()
    with open(out_path, "w", encoding="utf-8") as out:
        for path in sorted(glob.glob(os.path.join(directory, "*.jsonl"))):
            try:
                ex = example(read(path), trust_local)
            except (OSError, KeyError, TypeError):
                counts["unreadable"] += 1
                continue
            if ex is None:
                counts["skipped"] += 1
                continue
            out.write(json.dumps(ex, ensure_ascii=False) + "\n")
            counts["exported"] += 1
    return counts
