#!/usr/bin/env bash
# Command (2) of the README: install what the tests need, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
bash scripts/install_vscode_e2e.sh  # code-server, Node 24, playwright for tests/e2e_vscode (cached in .cache/)
# two pytest workers (one per core): most tests wait on jailed workers, servers and runners rather than
# compute; every test is independent (its own temp dirs, ports and documents; read-only LSP tests share one
# server per module, see tests/server/conftest.py SHARED)
exec .venv/bin/python -m pytest -n 2 --durations=30 "$@"
