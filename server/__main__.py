"""``python -m nki_agent.server``: the NKI language server over stdio (``--tcp HOST:PORT`` to debug)."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nki_agent.server", description="NKI Agent language server")
    parser.add_argument("--stdio", action="store_true", help="serve over stdin/stdout (the default)")
    parser.add_argument("--tcp", metavar="HOST:PORT", help="serve over TCP instead (for debugging)")
    parser.add_argument("--log-level", default=os.environ.get("NKI_AGENT_LOG", "WARNING"))
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .app import build

    server = build()
    # Everything imported so far lives as long as the server: move it out of the collector's view, so a
    # full collection (15-33 ms with the toolchain loaded) scans only what the session allocates since
    # and does not land inside a didChange -> publishDiagnostics on an edit.
    gc.collect()
    gc.freeze()
    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        server.serve_tcp(host or "127.0.0.1", int(port))
        return 0
    return server.serve_io()


if __name__ == "__main__":
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (ValueError, OSError):  # the client side is already closed
            pass
    os._exit(code)  # worker threads (a running simulation) must not keep a client-ended server alive
