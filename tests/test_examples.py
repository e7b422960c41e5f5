"""Every example kernel (examples/<task>/kernel_*.py) must verify correctly against its task.

Runs the embedded simulator in-process through ``nki_agent.toolchain.judging.verify.verify_files`` when it
is available, otherwise through the CLI (``python -m nki_agent verify ... --json``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
KERNELS = sorted(EXAMPLES.glob("*/kernel_*.py"))

try:  # in-process verifier
    from nki_agent.toolchain.judging.verify import verify_files  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - fallback before the verifier module exists
    verify_files = None


def _field(result: Any, name: str) -> Any:
    if isinstance(result, dict):
        return result.get(name)
    return getattr(result, name, None)


def _verify(kernel: Path, task: Path) -> Any:
    if verify_files is not None:
        return verify_files(str(kernel), str(task))
    proc = subprocess.run(
        [sys.executable, "-m", "nki_agent", "verify", str(kernel), "--task", str(task), "--json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"verifier produced no JSON (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


def test_examples_present() -> None:
    tasks = sorted(EXAMPLES.glob("*/task.py"))
    assert len(tasks) >= 14
    levels = {t.parent.name.split("_", 1)[0] for t in tasks}
    assert levels == {"l1", "l2", "l3"}
    for task in tasks:
        assert list(task.parent.glob("kernel_*.py")), f"{task.parent.name} has no kernel"


@pytest.mark.parametrize("kernel", KERNELS, ids=[f"{k.parent.name}/{k.stem}" for k in KERNELS])
def test_example_verifies(kernel: Path) -> None:
    task = kernel.parent / "task.py"
    result = _verify(kernel, task)
    correct = _field(result, "correct") is True
    assert correct, f"{kernel.parent.name}/{kernel.name} did not verify:\n{_summary(result)}"


def _summary(result: Any) -> str:
    """Problems and per-seed messages only (the full result carries a long trace)."""
    lines = [f"compiled={_field(result, 'compiled')}"]
    for p in _field(result, "problems") or []:
        code, msg, loc = (p.get(k) for k in ("code", "message", "location")) if isinstance(p, dict) else \
            (getattr(p, "code", ""), getattr(p, "message", p), getattr(p, "location", None))
        lines.append(f"[{code}] {msg} at {loc}")
    for s in _field(result, "seeds") or []:
        msg = s.get("message") if isinstance(s, dict) else getattr(s, "message", "")
        if msg:
            lines.append(f"seed {s.get('seed') if isinstance(s, dict) else getattr(s, 'seed', '?')}: {msg}")
    return "\n".join(lines)
