"""``mcw run`` for the e2e run, with the A1 path RMR feeds reachable on loopback.

The runtime is the one ``mcw run`` starts (:class:`xapp.app.process.XappProcess`, same
arguments, same config, same signals).  RMR's C library is in no registry reachable here, so
the A1 mediator's messages cannot arrive over RMR; instead a loopback HTTP listener hands each
POSTed body to ``process.a1.handle`` -- the handler RMR's A1_POLICY_REQ callback calls -- and
answers with the A1_POLICY_RESP bytes RMR would return.

Usage: ``python -m tests.e2e.xapp_host --a1-port PORT <mcw run arguments>``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from xapp.app.config import ConfigError, load_config
from xapp.app.json_logs import setup_logging
from xapp.app.process import XappProcess
from xapp.app.run_cli import configure
from xapp.app.run_options import RunOptions

#: An A1 message larger than this is refused before parsing (the handler bounds it too).
MAX_A1_BYTES = 64 * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.xapp_host",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--a1-port", type=int, required=True,
                        help="loopback port of the A1 listener (POST /a1)")
    configure(parser)
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, schemas=args.schemas_dir)
    except ConfigError as exc:
        print(f"xapp_host: {exc}", file=sys.stderr, flush=True)
        return 2
    setup_logging(config.controls.log_level, name=config.name)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    process = XappProcess(RunOptions.from_args(args), config)
    process.start()

    class A1(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            if self.path != "/a1" or not 0 < n <= MAX_A1_BYTES:
                self.send_error(400, "POST /a1 with a body of 1..65536 bytes")
                return
            body = process.a1.handle(self.rfile.read(n)).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", args.a1_port), A1)
    thread = threading.Thread(target=server.serve_forever, name="e2e-a1", daemon=True)
    thread.start()
    stop.wait()
    server.shutdown()
    process.stop(args.grace_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
