"""Language-server latency: didChange -> publishDiagnostics (p50/p99) and hover (p99).

Drives ``python -m nki_agent.server`` over stdio with raw JSON-RPC on generated 100-, 1,000- and
5,000-line kernel files; with ``ruff`` on PATH or in the venv, runs ``ruff server`` on the same edits side
by side. Each measured edit is a real change, alternately breaking the file (a space before a line, often
an indentation error) and repairing it (the space removed), and the clock runs from sending didChange to
receiving the publishDiagnostics of that version.

The debounce is a setting (``debounceMs``, default 20 ms, the pause after the last keystroke before a
check starts). By default this benchmark leaves it at the server's default, so the figures are what an
editor sees; ``--debounce-ms 0`` measures the server's own work (analysis, scheduling, protocol).

    .venv/bin/python benchmarks/lsp_latency.py [--edits 60] [--sizes 100,1000,5000] [--debounce-ms N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

KERNEL = '''
@nki.jit
def kernel_{k}(a):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(4):
        x = nl.load(a[i * 32:(i + 1) * 32, 0:512])
        y = nl.exp(x)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    nl.store(out, nl.load(a))
    return out
'''
HEADER = "import numpy as np\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n"


def make_kernel(lines: int) -> str:
    text, k = HEADER, 0
    while text.count("\n") < lines:
        text += KERNEL.format(k=k)
        k += 1
    return "\n".join(text.split("\n")[:lines]) + "\n"


class Conn:
    """A language server over stdio, raw JSON-RPC (server requests answered with null; publishes recorded
    with their arrival time). Shared by the LSP benchmarks."""

    def __init__(self, cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env, cwd=cwd)
        self.cond = threading.Condition()
        self.responses: dict[int, dict[str, Any]] = {}
        self.publishes: list[tuple[float, dict[str, Any]]] = []
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1].strip())
                elif line.strip() == b"" and length is not None:
                    break
            msg = json.loads(out.read(length))
            with self.cond:
                if msg.get("method") == "textDocument/publishDiagnostics":
                    self.publishes.append((time.perf_counter(), msg["params"]))
                elif "id" in msg and "method" in msg:
                    self.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
                elif "id" in msg:
                    self.responses[msg["id"]] = msg
                self.cond.notify_all()

    def send(self, obj: Any) -> None:
        body = json.dumps(obj).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def request(self, method: str, params: Any, timeout: float = 60) -> dict[str, Any]:
        self.next_id += 1
        i = self.next_id
        self.send({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
        with self.cond:
            if not self.cond.wait_for(lambda: i in self.responses, timeout):
                raise TimeoutError(f"{method}: no answer in {timeout} s")
            return self.responses.pop(i)

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def wait_publish(self, uri: str, version: int, timeout: float = 60) -> float:
        def found() -> float | None:
            for t, p in self.publishes:
                if p["uri"] == uri and p.get("version") == version:
                    return t
            return None

        with self.cond:
            self.cond.wait_for(lambda: found() is not None, timeout)
        t = found()
        if t is None:
            raise TimeoutError(f"no publish for version {version}")
        return t

    def close(self) -> None:
        try:
            self.request("shutdown", None, timeout=10)
            self.notify("exit", None)
            self.proc.wait(10)
        except Exception:  # noqa: BLE001
            self.proc.kill()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def run(cmd: list[str], text: str, edits: int, options: Any, hover: bool, tmp: Path) -> dict[str, float]:
    conn = Conn(cmd)
    conn.request("initialize", {"capabilities": {"textDocument": {"publishDiagnostics": {"versionSupport": True}}},
                                "rootUri": tmp.as_uri(), "initializationOptions": options})
    conn.notify("initialized", {})
    uri = (tmp / "kernel.py").as_uri()
    conn.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}})
    conn.wait_publish(uri, 1)
    lines = text.split("\n")
    diag: list[float] = []
    for v in range(2, edits + 2):
        line = 8 + ((v - v % 2) % max(1, len(lines) - 10))  # even versions add a space, odd ones remove it
        t0 = time.perf_counter()
        conn.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": v}, "contentChanges": [
            {"range": {"start": {"line": line, "character": 0}, "end": {"line": line, "character": v % 2}},
             "text": "" if v % 2 else " "}]})
        diag.append(conn.wait_publish(uri, v) - t0)
    out = {"diag_p50_ms": 1000 * statistics.median(diag), "diag_p99_ms": 1000 * pct(diag, 0.99)}
    if hover:
        hov = []
        for k in range(edits):
            line = next(i for i in range(5 + (k * 7) % max(1, len(lines) - 10), len(lines)) if "t = nl.ndarray" in lines[i])
            t0 = time.perf_counter()
            conn.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": line, "character": 4}})
            hov.append(time.perf_counter() - t0)
        out["hover_p50_ms"] = 1000 * statistics.median(hov)
        out["hover_p99_ms"] = 1000 * pct(hov, 0.99)
    conn.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--edits", type=int, default=60)
    ap.add_argument("--sizes", default="100,1000,5000")
    ap.add_argument("--debounce-ms", type=int, default=None,
                    help="the server's debounceMs setting (default: leave the server's default, 20 ms)")
    args = ap.parse_args()
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="nki-lsp-bench-"))
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    debounce = "server default (20 ms)" if args.debounce_ms is None else f"{args.debounce_ms} ms"
    print(f"didChange -> publishDiagnostics, debounceMs {debounce}; {args.edits} edits per size")
    options: dict[str, object] = {"simulateOnSave": False}
    if args.debounce_ms is not None:
        options["debounceMs"] = args.debounce_ms
    print(f"{'lines':>6} {'server':>10} {'diag p50':>10} {'diag p99':>10} {'hover p50':>10} {'hover p99':>10}")
    for size in (int(s) for s in args.sizes.split(",")):
        text = make_kernel(size)
        rows = [("nki-agent", run([sys.executable, "-m", "nki_agent.server"], text, args.edits,
                                  {"nkiAgent": options}, True, tmp))]
        if ruff:
            rows.append(("ruff", run([ruff, "server"], text, args.edits, {}, False, tmp)))
        for name, r in rows:
            print(f"{size:>6} {name:>10} {r['diag_p50_ms']:>9.1f}ms {r['diag_p99_ms']:>9.1f}ms "
                  f"{r.get('hover_p50_ms', float('nan')):>9.1f}ms {r.get('hover_p99_ms', float('nan')):>9.1f}ms")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
