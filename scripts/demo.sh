#!/usr/bin/env bash
# Command (1) of the README: install everything, then run the main job on the embedded toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/nki-agent demo "$@"
