"""Every example kernel (examples/<task>/kernel_*.py) must verify correctly against its task.

Runs the embedded simulator in-process through ``nki_agent.toolchain.verify.verify_files`` when it
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
    from nki_agent.toolchain.verify import verify_files  # type: ignore[attr-defined]
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
    correct = _field(result, "correct")
    detail = result if isinstance(result, dict) else getattr(result, "__dict__", result)
    assert correct is True, f"{kernel.parent.name}/{kernel.name} did not verify:\n{detail}"
