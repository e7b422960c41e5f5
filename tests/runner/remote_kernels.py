"""Kernel folders for the remote-runner client tests, written into a test's ``tmp_path``.

Small inputs (200 x 64): every verification spawns jailed workers, so the figures stay cheap.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ADD = ROOT / "examples" / "l1_add"
ADD_CALL = "nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)"
TASK = (ADD / "task.py").read_text().replace("2112, 1024", "200, 64")
HELPERS = ("import nki.isa as nisa\nimport nki.language as nl\nfrom tile_ops import OP\n\n\n"
           "def tile_add(dst, a, b):\n"
           "    nisa.tensor_tensor(dst=dst, data1=a, data2=b, op=OP)\n\n\n"
           "def tile_bad(dst, a, b):\n"
           "    nisa.tensor_tensor(dst=dst, data1=a, data2=b[0:3, 0:5], op=OP)\n")
TILE_OPS = "import nki.language as nl\n\nOP = nl.add\n"
BAD_LINE = next(i for i, ln in enumerate(HELPERS.splitlines(), 1) if "b[0:3" in ln)  # tile_bad's call
HANG = ("import neuronxcc.nki as nki\nimport numpy as np\n\n\n"
        "def get_inputs():\n    return [np.ones((4, 4), np.float32)]\n\n\n"
        "def reference(a):\n    return a\n\n\n"
        "@nki.jit\ndef kernel(a):\n    while True:\n        pass\n")


def kernel_text(helper: str = "tile_add") -> str:
    src = (ADD / "kernel_new.py").read_text()
    assert ADD_CALL in src
    return (src.replace("import nki.language as nl\n", f"import nki.language as nl\nfrom tile_helpers import {helper}\n")
            .replace(ADD_CALL, f"{helper}(c_tile, a_tile, b_tile)"))


def sibling_project(folder: Path, kernel_name: str = "kernel.py", helper: str = "tile_add") -> tuple[Path, Path]:
    """``folder``/ with a kernel importing ``tile_helpers`` (which imports ``tile_ops``) and a task.py."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tile_helpers.py").write_text(HELPERS)
    (folder / "tile_ops.py").write_text(TILE_OPS)
    (folder / "task.py").write_text(TASK)
    kernel = folder / kernel_name
    kernel.write_text(kernel_text(helper))
    return kernel, folder / "task.py"


def small_add(folder: Path, name: str = "add_kernel.py") -> tuple[Path, Path]:
    """The l1_add classic kernel with a small task.py next to it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.py").write_text(TASK)
    kernel = folder / name
    kernel.write_text((ADD / "kernel_classic.py").read_text())
    return kernel, folder / "task.py"
