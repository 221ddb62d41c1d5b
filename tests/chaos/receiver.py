"""The soak's webhook receiver: a helpdesk that takes every POST and keeps its `webhook-id`.

Every replica's webhook worker sends to it through the fault proxy (tests/chaos/netproxy.py),
so a black hole on that path holds deliveries mid-request. The checker then wants every
event of `webhook_outbox` here at least once, by id (a redelivery keeps its id).
"""

from __future__ import annotations

import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Self


class Quiet(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        return  # a delivery the proxy reset on purpose: the sender tries again


class WebhookReceiver:
    def __init__(self) -> None:
        self.received: Counter[str] = Counter()  # webhook-id: deliveries
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                event_id = self.headers.get("webhook-id") or ""
                with receiver._lock:
                    receiver.received[event_id] += 1
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = Quiet(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def ids(self) -> set[str]:
        with self._lock:
            return set(self.received)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
