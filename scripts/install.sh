#!/usr/bin/env bash
# Create .venv (if missing) and install NKI Agent with its test and torch extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
.venv/bin/python -m pip install -q -e '.[dev,torch]'
# Bytecode for the project's own modules: an editable install compiles none, and the jailed workers never
# write any (-B), so without it every worker compiles the simulator from source at start (~0.1 s of CPU each,
# three workers per verification). Stale files are harmless: Python recompiles a changed module in memory.
.venv/bin/python -m compileall -q -j 0 nki_agent toolchain diagnostics server agent runner > /dev/null

# The VS Code extension, when npm is present: npm ci (versions pinned by package-lock.json), then the
# bundle (extension/out/extension.js) and dist/nki-agent-<version>.vsix (which carries the server wheel).
# Each step is skipped when its inputs have not changed since it last ran.
if command -v npm >/dev/null 2>&1; then
  lock_sum=$(sha256sum package-lock.json | cut -d' ' -f1)
  if [ "$(cat node_modules/.nki-agent-lock 2>/dev/null)" != "$lock_sum" ]; then
    npm ci --no-audit --no-fund --loglevel=error
    echo "$lock_sum" > node_modules/.nki-agent-lock
  fi
  vsix="dist/nki-agent-$(node -p 'require("./package.json").version').vsix"
  if [ ! -f "$vsix" ] || [ -n "$(find package.json package-lock.json pyproject.toml extension/src extension/build.mjs \
      extension/README.md nki_agent toolchain diagnostics server agent runner -newer "$vsix" \
      \( -name '*.ts' -o -name '*.mjs' -o -name '*.json' -o -name '*.md' -o -name '*.py' -o -name '*.toml' \) \
      -not -path '*/__pycache__/*' -print -quit)" ]; then
    node extension/build.mjs --package --python .venv/bin/python
  fi
else
  echo "install.sh: npm not found; skipping the VS Code extension build (the language server works without it)" >&2
fi
