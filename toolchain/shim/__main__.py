"""``python -m nki_agent.toolchain.shim [-m MODULE | FILE] [ARGS...]``: run Python code with NKI imports simulated.

Works like ``python FILE`` / ``python -m MODULE`` except that ``neuronxcc.nki*`` and ``nki*`` resolve to
the embedded simulator. Used to run public kernels and their own tests without the Neuron SDK.
"""

from __future__ import annotations

import os
import runpy
import sys

from . import install


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 2
    install()
    if argv[0] == "-m":
        if len(argv) < 2:
            print("usage: python -m nki_agent.toolchain.shim -m MODULE [ARGS...]", file=sys.stderr)
            return 2
        sys.argv = [argv[1]] + argv[2:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    path = argv[0]
    if not os.path.isfile(path):
        print(f"error: no such file: {path}", file=sys.stderr)
        return 2
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    runpy.run_path(path, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
