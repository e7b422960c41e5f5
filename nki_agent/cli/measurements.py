"""The user's configuration folder and the measured latencies recorded in it for the cost model's calibration.

``config_dir()`` is env ``NKI_AGENT_CONFIG_DIR`` when set, else ``~/.config/nki-agent`` (tests set the
variable to a temp folder). ``nki-agent profile --runner URL`` appends one line to
``measurements.jsonl`` there for every *measured* latency a remote runner reports (never for an
estimate): ``{kernel, task, kernel_name, target, measured_us, estimated_us, kernel_sha256, when}``, so
``nki-agent calibrate`` can pair measurements with the cost model's predictions later. The file is
bounded: past ``MAX_BYTES`` the oldest half is dropped (rewritten atomically). A line that does not
parse is skipped when reading, never fatal.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CONFIG_ENV = "NKI_AGENT_CONFIG_DIR"
MEASUREMENTS = "measurements.jsonl"
MAX_BYTES = 4 << 20  # ~20k measurements; a calibration needs tens, the newest matter most
MAX_LINE = 8192  # one record's JSON (paths included); a longer line is not ours


def config_dir() -> Path:
    """Where nki-agent keeps per-user state (not created here)."""
    env = os.environ.get(CONFIG_ENV, "").strip()
    return Path(env).expanduser() if env else Path.home() / ".config" / "nki-agent"


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes ("" when it cannot be read): tells calibrate whether a kernel changed."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""


@dataclass
class Measurement:
    """One measured latency of a kernel on a task and target (and the estimate at the time, if any)."""

    kernel: str
    task: str
    target: str
    measured_us: float
    estimated_us: float | None = None
    kernel_name: str | None = None
    kernel_sha256: str = ""
    when: str = ""

    @classmethod
    def of(cls, d: Any) -> Measurement | None:
        """A record from its JSON, or None when it is not one."""
        if not isinstance(d, dict):
            return None
        try:
            m = cls(kernel=str(d["kernel"]), task=str(d["task"]), target=str(d["target"]),
                    measured_us=float(d["measured_us"]),
                    estimated_us=None if d.get("estimated_us") is None else float(d["estimated_us"]),
                    kernel_name=None if d.get("kernel_name") in (None, "") else str(d["kernel_name"]),
                    kernel_sha256=str(d.get("kernel_sha256", "")), when=str(d.get("when", "")))
        except (KeyError, TypeError, ValueError):
            return None
        return m if math.isfinite(m.measured_us) and m.measured_us > 0 else None


def record(m: Measurement, folder: Path | None = None) -> Path:
    """Append ``m`` (stamped now, UTC) to ``measurements.jsonl``; returns the file. Raises ``OSError``."""
    folder = folder or config_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / MEASUREMENTS
    if not m.when:
        m.when = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    line = json.dumps(asdict(m), allow_nan=False, separators=(",", ":"))
    if len(line) > MAX_LINE:
        raise OSError(f"measurement record too long ({len(line)} bytes)")
    _trim(path, MAX_BYTES - len(line) - 1)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
    return path


def _trim(path: Path, room: int) -> None:
    """Keep the newest half of ``path``'s lines when it is larger than ``room`` bytes."""
    try:
        if path.stat().st_size <= room:
            return
        data = path.read_bytes()
    except FileNotFoundError:
        return
    keep = data[len(data) // 2:]
    keep = keep[keep.find(b"\n") + 1:] if b"\n" in keep else b""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(keep)
    os.replace(tmp, path)


def read(folder: Path | None = None, target: str | None = None) -> Iterator[Measurement]:
    """The recorded measurements, oldest first (only ``target``'s when given)."""
    path = (folder or config_dir()) / MEASUREMENTS
    if not path.is_file():
        return
    with open(path, encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            if len(raw) > MAX_LINE or not raw.strip():
                continue
            try:
                m = Measurement.of(json.loads(raw))
            except json.JSONDecodeError:
                continue
            if m is not None and (target is None or m.target == target):
                yield m
