#!/usr/bin/env bash
# Command (1) of the README: install everything, then run the main job on the embedded toolchain:
# verify every example kernel, then let the fix agent (offline rules backend) repair a broken one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/nki-agent demo "$@"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp tests/fixtures/sim_fixes/mask_and.py "$work/kernel.py"
echo
echo "Fix agent (offline rules backend) on a broken kernel: $work/kernel.py"
.venv/bin/nki-agent fix "$work/kernel.py" --model rules --no-trajectory --apply
