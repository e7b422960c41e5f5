"""The VS Code end-to-end harness: a real code-server (installed by scripts/install_vscode_e2e.sh under
.cache/vscode-e2e) with the built ``dist/nki-agent-<version>.vsix`` installed, driven by Python playwright
in Debian's Chromium. It owns starting and stopping code-server (one process, user-data dir and workspace
per scenario, settings written before the start: code-server reads user settings once), and the
workbench actions the scenarios share (open a file, run a palette command, read the Problems panel,
notifications, code lenses and the status bar). Every wait is on a DOM condition or a process event
with a generous bound, never a fixed sleep."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "vscode-e2e"
NODE_BIN = CACHE / "bin"
CODE_SERVER = CACHE / "code-server" / "node_modules" / ".bin" / "code-server"
CHROMIUM = Path(shutil.which("chromium") or "/usr/bin/chromium")  # Debian's package
ARTIFACTS = ROOT / ".cache" / "e2e-artifacts"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"

START_TIMEOUT_S = 120.0     # code-server listening
PALETTE_ATTEMPT_MS = 20_000  # one try of the command palette before it is reopened
UI_TIMEOUT_MS = 120_000     # a workbench element, a diagnostic after a sandboxed run on a loaded machine
SLOW_TIMEOUT_MS = 420_000   # pip installing the package into a fresh venv

BASE_SETTINGS: dict[str, Any] = {
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": False,
    "workbench.welcomePage.walkthroughs.openOnInstall": False,
    "workbench.secondarySideBar.defaultVisibility": "hidden",
    "security.workspace.trust.enabled": False,
    "telemetry.telemetryLevel": "off",
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "extensions.ignoreRecommendations": True,
    "update.mode": "none",
    "chat.disableAIFeatures": True,
    "window.restoreWindows": "none",
    "files.autoSave": "off",
    "editor.hover.delay": 200,
    "editor.minimap.enabled": False,
    "nkiAgent.verifyOnSave": "off",
    "nkiAgent.modelBackend": "rules",
}


def version() -> str:
    return str(json.loads((ROOT / "package.json").read_text())["version"])


def vsix() -> Path:
    return ROOT / "dist" / f"nki-agent-{version()}.vsix"


def vsix_commands(path: Path) -> set[str]:
    """The command ids a .vsix contributes (what is installed, whatever the sources say now)."""
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read("extension/package.json"))
    return {c["command"] for c in manifest.get("contributes", {}).get("commands", [])}


def unavailable_reason() -> str | None:
    """Why the e2e cannot run here (one sentence), or None."""
    marker = CACHE / "UNAVAILABLE"
    if marker.exists():
        return f"VS Code e2e prerequisites unavailable: {marker.read_text().strip()}"
    missing = [str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)
               for p in (NODE_BIN / "node", CODE_SERVER, CHROMIUM) if not p.exists()]
    if missing:
        return f"VS Code e2e prerequisites not installed ({', '.join(missing)}): run bash scripts/install_vscode_e2e.sh"
    if not vsix().exists():
        return f"{vsix().relative_to(ROOT)} not built (scripts/install.sh builds it when npm is present)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "python playwright is not installed in .venv: run bash scripts/install_vscode_e2e.sh"
    return None


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VSCODE_", "ELECTRON_"))}
    env["PATH"] = f"{NODE_BIN}{os.pathsep}{env.get('PATH', '')}"
    # code-server writes heartbeat/logs under XDG_DATA_HOME even with --user-data-dir: keep them in the test's dir
    for var, sub in (("XDG_DATA_HOME", "data"), ("XDG_CONFIG_HOME", "config"), ("XDG_CACHE_HOME", "cache")):
        (home / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(home / sub)
    env.pop("ANTHROPIC_API_KEY", None)
    return env


def _config_file(home: Path) -> Path:
    cfg = home / "code-server.yaml"  # always given: without --config code-server writes one with a password
    cfg.write_text("auth: none\ncert: false\n")
    return cfg


def install_extension(extensions_dir: Path, home: Path) -> Path:
    """Installs a copy of the built .vsix (a rebuild during the run cannot change what is tested) into
    ``extensions_dir`` (code-server --install-extension); returns the copy."""
    home.mkdir(parents=True, exist_ok=True)
    copy = home / vsix().name
    shutil.copy(vsix(), copy)
    proc = subprocess.run(
        [str(CODE_SERVER), "--config", str(_config_file(home)), "--user-data-dir", str(home / "install-data"),
         "--extensions-dir", str(extensions_dir), "--install-extension", str(copy)],
        env=_env(home), capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0 and "successfully installed" in proc.stdout, proc.stdout + proc.stderr
    return copy


@dataclass
class CodeServer:
    """One running code-server; ``url(folder)`` opens a workbench on ``folder``."""

    proc: subprocess.Popen[str]
    port: int
    log: Path

    def url(self, folder: Path) -> str:
        return f"http://127.0.0.1:{self.port}/?folder={folder}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the wrapper's group: extension hosts, watchers, servers
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)


LISTENING = re.compile(r"HTTP server listening on https?://127\.0\.0\.1:(\d+)")


def start_code_server(home: Path, extensions_dir: Path, settings: dict[str, Any],
                      env_extra: dict[str, str] | None = None) -> CodeServer:
    """A fresh code-server on 127.0.0.1 (port chosen by the OS), user settings written before it starts."""
    user = home / "user-data" / "User"
    user.mkdir(parents=True, exist_ok=True)
    (user / "settings.json").write_text(json.dumps({**BASE_SETTINGS, **settings}, indent=2))
    # code-server's window is a remote one: machine-scoped settings (nkiAgent.interpreter, runnerUrl, ...) apply
    # from the remote machine's settings, not the browser-side user settings; write them there too
    machine = home / "user-data" / "Machine"
    machine.mkdir(parents=True, exist_ok=True)
    (machine / "settings.json").write_text(json.dumps(settings, indent=2))
    env = _env(home)
    env.update(env_extra or {})
    log = home / "code-server.log"
    proc = subprocess.Popen(
        [str(CODE_SERVER), "--config", str(_config_file(home)), "--bind-addr", "127.0.0.1:0", "--auth", "none",
         "--user-data-dir", str(home / "user-data"), "--extensions-dir", str(extensions_dir),
         "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust",
         "--disable-getting-started-override"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        with log.open("w") as out:
            for line in proc.stdout:
                out.write(line)
                out.flush()
                lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    while True:
        try:
            line = lines.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            line = None
        if line is None:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("code-server did not start listening:\n" + "".join(seen[-40:]))
        seen.append(line)
        if m := LISTENING.search(line):
            return CodeServer(proc, int(m.group(1)), log)


def artifacts_dir(test_name: str) -> Path:
    d = ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    print(f"e2e artifacts: {d}", file=sys.stderr)
    return d


def launch_browser(pw: Any) -> Any:
    return pw.chromium.launch(
        executable_path=str(CHROMIUM), headless=True,
        args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"])


class Workbench:
    """One browser page on a code-server workbench."""

    def __init__(self, page: Any, shots: Path) -> None:
        self.page = page
        self.shots = shots
        self.n = 0

    def open(self, server: CodeServer, folder: Path) -> None:
        self.page.goto(server.url(folder))
        self.page.wait_for_selector(".monaco-workbench .part.statusbar", timeout=UI_TIMEOUT_MS)

    def shot(self, name: str) -> Path:
        self.n += 1
        path = self.shots / f"{self.n:02d}-{name}.png"
        self.page.screenshot(path=str(path))
        return path

    def open_file(self, name: str) -> None:
        row = self.page.locator(".explorer-folders-view .monaco-list-row", has_text=name).first
        row.wait_for(timeout=UI_TIMEOUT_MS)
        row.click()
        self.page.locator(f'.tabs-container .tab[aria-label^="{name}"]').first.wait_for(timeout=UI_TIMEOUT_MS)
        self.page.locator(".monaco-editor .view-lines").first.wait_for(timeout=UI_TIMEOUT_MS)

    def focus_editor(self) -> None:
        self.page.locator(".monaco-editor .view-lines").first.click()

    def run_command(self, title: str) -> None:
        """The palette: F1, type the command's title, click the row that is it.

        On a loaded machine the palette can open before the editor's context (``editorLangId``, which gates our
        commands) has settled, and then never lists the command; so each attempt re-focuses the editor and
        reopens the palette, until the command shows or the UI timeout has passed in all."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        deadline = time.monotonic() + UI_TIMEOUT_MS / 1000
        box = self.page.locator(".quick-input-widget input")
        row = self.page.locator(".quick-input-widget .monaco-list-row", has_text=title).first
        while True:
            self.focus_editor()
            self.page.keyboard.press("F1")
            box.wait_for(timeout=UI_TIMEOUT_MS)
            box.fill(">" + title)
            left_ms = int((deadline - time.monotonic()) * 1000)
            try:
                row.wait_for(timeout=max(1000, min(PALETTE_ATTEMPT_MS, left_ms)))
                break
            except PlaywrightTimeout:
                if left_ms <= PALETTE_ATTEMPT_MS:
                    raise
                self.page.keyboard.press("Escape")
        row.click()

    def editor_text(self) -> str:
        return str(self.page.locator(".monaco-editor .view-lines").first.inner_text()).replace("\u00a0", " ")

    def wait_editor_text(self, needle: str, timeout: int = UI_TIMEOUT_MS) -> None:
        self.page.wait_for_function(
            "n => [...document.querySelectorAll('.monaco-editor .view-lines')].some("
            "e => e.innerText.replace(/\\u00a0/g, ' ').includes(n))", arg=needle, timeout=timeout)

    def problems(self, needle: str, timeout: int = UI_TIMEOUT_MS) -> list[str]:
        """Opens the Problems panel and waits for a row containing ``needle``; returns all rows' text."""
        self.focus_editor()
        self.page.keyboard.press("Control+Shift+M")
        rows = self.page.locator(".markers-panel .monaco-list-row")
        rows.filter(has_text=needle).first.wait_for(timeout=timeout)
        return [str(t) for t in rows.all_inner_texts()]

    def notification(self, needle: str, timeout: int = UI_TIMEOUT_MS) -> Any:
        toast = self.page.locator(".notifications-toasts .notification-toast", has_text=needle).first
        toast.wait_for(timeout=timeout)
        return toast

    def notification_texts(self) -> list[str]:
        return [str(t) for t in self.page.locator(
            ".notifications-toasts .notification-toast .notification-list-item-message").all_inner_texts()]

    def status_item(self, needle: str, timeout: int = UI_TIMEOUT_MS) -> str:
        item = self.page.locator(".part.statusbar .statusbar-item", has_text=needle).first
        item.wait_for(timeout=timeout)
        return str(item.inner_text())

    def code_lens(self, pattern: str, timeout: int = UI_TIMEOUT_MS) -> str:
        """Waits for a code lens whose text matches the regex ``pattern``; returns it."""
        handle = self.page.wait_for_function(
            "p => { const r = new RegExp(p); const l = [...document.querySelectorAll('.monaco-editor .codelens-decoration')]"
            ".map(e => e.innerText).find(t => r.test(t)); return l || false; }", arg=pattern, timeout=timeout)
        return str(handle.json_value())

    def code_lenses(self) -> list[str]:
        return [str(t) for t in self.page.locator(".monaco-editor .codelens-decoration").all_inner_texts()]

    def token_box(self, text: str, timeout: int = UI_TIMEOUT_MS) -> dict[str, float]:
        """The screen box of the first rendered editor token that is ``text`` (leading spaces aside)."""
        handle = self.page.wait_for_function(
            "t => { for (const e of document.querySelectorAll('.monaco-editor .view-lines .view-line span')) {"
            " if (e.children.length === 0 && e.textContent.replace(/\\u00a0/g, ' ').trim() === t) {"
            " const r = e.getBoundingClientRect(); const lead = e.textContent.length - e.textContent.trimStart().length;"
            " const w = r.width / e.textContent.length;"
            " return {x: r.x + lead * w, y: r.y, width: r.width - lead * w, height: r.height}; } } return false; }",
            arg=text, timeout=timeout)
        return dict(handle.json_value())

    def hover(self, text: str, needle: str, attempts: int = 12) -> str:
        """Hovers the token ``text`` until a hover containing ``needle`` shows; returns the hover's text.
        A hover asked before the server answers stays empty, so the mouse leaves and comes back (each try
        waits on the hover element, up to ``attempts`` times)."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout
        hov = self.page.locator(".monaco-hover:not(.hidden) .monaco-hover-content", has_text=needle).first
        for _ in range(attempts):
            box = self.token_box(text)
            self.page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            try:
                hov.wait_for(timeout=10_000)
                return str(hov.inner_text())
            except PlaywrightTimeout:
                self.page.mouse.move(1, 1)
                self.page.keyboard.press("Escape")
        raise AssertionError(f"no hover with {needle!r} on {text!r} after {attempts} tries")
