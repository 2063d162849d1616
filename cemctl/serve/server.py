"""The HTTP side of `cemctl serve`: the standard library's threading HTTP server around `Dashboard.handle`.

    server = make_server(app, host="127.0.0.1", port=0)   # port 0: a free one
    server.url                                             # http://127.0.0.1:PORT/
    server.serve_forever()                                 # until shutdown() or Ctrl-C (then server_close())

Each request is handled in its own thread (the database engine is shared, sessions are per
request); a slow or idle client is dropped after `REQUEST_TIMEOUT_S`. GET and HEAD are
answered; every other method, known or not, is 405 with `Allow: GET, HEAD`. Nothing is logged
per request; internal errors print their traceback to the terminal (stderr).
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REQUEST_TIMEOUT_S = 30.0


def is_loopback(host: str) -> bool:
    """Whether binding `host` listens on this machine's loopback interface only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Handler(BaseHTTPRequestHandler):
    server_version = "cemctl-serve"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    timeout = REQUEST_TIMEOUT_S

    def _answer(self) -> None:
        app = self.server.app  # type: ignore[attr-defined]
        resp = app.handle(self.command, self.path, self.headers.get("Host"), self.headers.get("X-Cemctl-Moment"))
        self.send_response(resp.status)
        for k, v in resp.all_headers().items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD" and resp.body:
            self.wfile.write(resp.body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer()

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer()

    def _refuse(self) -> None:
        length = self.headers.get("Content-Length")
        if length and length.isdigit() and int(length) <= 1 << 20:
            self.rfile.read(int(length))  # drain a small body so the connection stays usable
        else:
            self.close_connection = True
        self._answer()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):  # POST, PUT, DELETE, PATCH, OPTIONS, any other method: 405
            return self._refuse
        raise AttributeError(name)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: no line per request
        return

    def log_error(self, format: str, *args: Any) -> None:  # noqa: A002
        return


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], app: Any) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.app = app
        super().__init__(address, Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        text = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{text}]" if ":" in text else text
        return f"http://{shown}:{port}/"

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, socket.timeout)):
            return  # a client that went away
        super().handle_error(request, client_address)


def make_server(app: Any, host: str = "127.0.0.1", port: int = 8765) -> DashboardServer:
    """A server bound to (host, port) (port 0: any free port); OSError when the port is taken."""
    return DashboardServer((host, port), app)
