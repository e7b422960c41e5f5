"""The sandbox's mechanisms one by one: the wire format against hostile frames, output caps, the jail's
view of the machine, and the fallback where namespaces are unavailable."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from nki_agent.toolchain import api
from nki_agent.toolchain.isolation import jail, sandbox
from nki_agent.toolchain.protocol import wire

ROOT = Path(__file__).resolve().parents[2]
ADD = ROOT / "examples" / "l1_add"
JAILED = jail.status().available
needs_jail = pytest.mark.skipif(not JAILED, reason=f"no jail here: {jail.status().reason}")


def _frame(header: object) -> bytes:
    raw = json.dumps(header).encode()
    return wire.MAGIC + struct.pack("<Q", len(raw)) + raw


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn])
def test_arrays_cross_the_wire_unchanged(dtype: object) -> None:
    arrays = [np.arange(24).reshape(2, 3, 4).astype(dtype), None, np.zeros((0, 5), dtype)]
    data = b"".join(bytes(p) for p in wire.encode({"k": 1}, arrays))
    header, got, used = wire.decode(bytearray(data), 1 << 20)
    assert header["k"] == 1 and used == len(data)
    assert got[1] is None and got[0].dtype == np.dtype(dtype) and np.array_equal(got[0], arrays[0])
    assert got[2].shape == (0, 5)
    h2, got2 = wire.read(io.BufferedReader(io.BytesIO(data)), 1 << 20)  # type: ignore[arg-type]
    assert h2["k"] == 1 and np.array_equal(got2[0], arrays[0])


HOSTILE_FRAMES = {
    "not_a_frame": b"{\"ok\": true, \"result\": {\"correct\": true}}",
    "truncated_prefix": wire.MAGIC[:3],
    "huge_header_length": wire.MAGIC + struct.pack("<Q", 1 << 40),
    "header_not_json": wire.MAGIC + struct.pack("<Q", 3) + b"{{{",
    "header_not_an_object": _frame([1, 2, 3]),
    "object_dtype": _frame({"arrays": [{"dtype": "object", "shape": [1]}]}) + b"\0" * 8,
    "string_dtype": _frame({"arrays": [{"dtype": "<U10", "shape": [1]}]}) + b"\0" * 40,
    "record_dtype": _frame({"arrays": [{"dtype": "i4,f4", "shape": [1]}]}) + b"\0" * 8,
    "negative_shape": _frame({"arrays": [{"dtype": "float32", "shape": [-1]}]}),
    "too_many_dims": _frame({"arrays": [{"dtype": "float32", "shape": [1] * 9}]}) + b"\0" * 4,
    "extra_fields": _frame({"arrays": [{"dtype": "float32", "shape": [1], "offset": 99}]}) + b"\0" * 4,
    "over_the_cap": _frame({"arrays": [{"dtype": "float64", "shape": [1 << 30, 1 << 30]}]}),
    "data_missing": _frame({"arrays": [{"dtype": "float32", "shape": [1000]}]}) + b"\0" * 10,
    "arrays_not_a_list": _frame({"arrays": {"dtype": "float32"}}),
}


@pytest.mark.parametrize("data", list(HOSTILE_FRAMES.values()), ids=list(HOSTILE_FRAMES))
def test_a_hostile_frame_is_a_clear_error_before_any_allocation(data: bytes) -> None:
    with pytest.raises(wire.WireError):
        wire.decode(data, 1 << 20)


def _kernel(tmp_path: Path, prefix: str) -> Path:
    path = tmp_path / "kernel.py"
    path.write_text(prefix + (ADD / "kernel_new.py").read_text())
    (tmp_path / "task.py").write_text((ADD / "task.py").read_text().replace("2112, 1024", "256, 128"))
    return path


def test_a_stderr_flood_is_capped_and_said_to_be(tmp_path: Path) -> None:
    kernel = _kernel(tmp_path, "import os\n_b = b'x' * (1 << 20)\nfor _ in range(300):\n    os.write(2, _b)\n")
    res = api.verify(str(kernel), str(tmp_path / "task.py"), seeds=1, timeout=120)
    assert res.correct is True, res.problems  # 300 MB of noise, and the kernel still verifies
    assert len(res.stderr) <= sandbox.STDERR_TAIL and not any("output truncated" in p.message for p in res.problems)
    w = sandbox.start(sandbox.Job({"op": "simulate", "kernel": str(kernel), "task": str(tmp_path / "task.py")}))
    w.close_input()
    reply = w.result()
    assert w.stderr.dropped >= 299 << 20 and len(w.stderr.text()) < sandbox.STREAM_HEAD + sandbox.STREAM_TAIL + 200
    assert "output truncated" in w.stderr.text() and not reply.failed


def test_a_flood_on_the_result_channel_ends_the_worker(tmp_path: Path) -> None:
    kernel = _kernel(tmp_path, "import os\n_b = b'x' * (1 << 20)\nfor _fd in range(3, 12):\n    try:\n"
                               "        for _ in range(200):\n            os.write(_fd, _b)\n    except OSError:\n"
                               "        pass\n")
    res = api.verify(str(kernel), str(tmp_path / "task.py"), seeds=1, timeout=120)
    assert res.correct is False
    assert [p.code for p in res.problems][:1] in (["sim_output_limit"], ["sim_worker_crash"]), res.problems


@needs_jail
def test_the_jail_sees_no_secrets_no_network_and_no_other_process(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-canary-jail-0001")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    probe = (f"import os, socket, sys\n_seen = []\n_seen.append(str(dict(os.environ)))\n"
             f"_seen.append(open('/proc/1/environ', 'rb').read().decode('latin-1'))\n"
             f"_seen.append(str(sorted(p for p in os.listdir('/proc') if p.isdigit())))\n"
             f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    _seen.append('CONNECTED')\n"
             f"except OSError:\n    pass\ntry:\n    os.fork()\n    _seen.append('FORKED')\nexcept OSError:\n    pass\n"
             f"try:\n    open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'x'), 'w')\n"
             f"    _seen.append('WROTE')\nexcept OSError:\n    pass\nsys.stderr.write(repr(_seen))\n")
    kernel = _kernel(tmp_path, probe)
    reply = sandbox.run({"op": "simulate", "kernel": str(kernel), "task": str(tmp_path / "task.py")})
    seen = reply["stderr"]
    assert reply["sandbox"] == "bwrap" and reply["result"]["ran"] is True, reply
    assert "sk-canary" not in seen and "HOME': '/job'" in seen
    assert "CONNECTED" not in seen and "FORKED" not in seen
    assert "['1', '2']" in seen  # bwrap's init and the worker: nothing else is visible
    # the kernel's folder is not bound (only the kernel file is): under /tmp its path exists only on the jail's
    # private tmpfs, so a write beside the kernel may succeed there and must never reach the host's folder
    assert not (tmp_path / "x").exists()
    listener.setblocking(False)
    with pytest.raises(BlockingIOError):
        listener.accept()
    listener.close()


def test_without_namespaces_results_say_unsandboxed(monkeypatch: pytest.MonkeyPatch,
                                                    capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NKI_AGENT_BWRAP", "/nonexistent/bwrap")
    st = jail.status()
    assert not st.available and st.label == "unsandboxed" and "/nonexistent/bwrap" in st.reason
    monkeypatch.setattr(sandbox, "_warned", __import__("threading").Event())
    for _ in range(2):
        res = api.verify(str(ADD / "kernel_new.py"), str(ADD / "task.py"), seeds=1)
        assert res.correct is True and res.sandbox == "unsandboxed"
    assert capfd.readouterr().err.count("UNSANDBOXED") == 1  # said once


@needs_jail
def test_the_command_line_asks_for_every_namespace_and_hides_the_task() -> None:
    task = str(ADD / "task.py")
    argv = jail.command(jail.JailSpec(readable=(str(ADD),), hidden=(task,)), ["python"], "bwrap", 9)
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--die-with-parent",
                 "--disable-userns", "--new-session"):
        assert flag in argv
    assert argv[argv.index("--seccomp") + 1] == "9"
    i = argv.index(task)
    assert argv[i - 2:i] == ["--ro-bind", "/dev/null"] and argv.index(str(ADD)) < i  # hidden after the folder
    assert argv[-2:] == ["--", "python"] and "--remount-ro" in argv
