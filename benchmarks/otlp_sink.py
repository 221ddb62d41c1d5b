"""An OTLP/HTTP endpoint that accepts every export and keeps nothing, for `benchmarks.run
--trace`: the service then pays for making, batching, encoding and sending its spans, and
no collector's cost is mixed in.

    python -m benchmarks.otlp_sink --port 4318    # GET / answers 200 once it listens
"""

from __future__ import annotations

import argparse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Sink(BaseHTTPRequestHandler):
    exports = 0
    received = 0

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        Sink.exports += 1
        Sink.received += length
        self._answer(b"")  # an empty ExportTraceServiceResponse: everything accepted

    def do_GET(self) -> None:
        self._answer(f"exports {Sink.exports}, bytes {Sink.received}\n".encode())

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.otlp_sink")
    parser.add_argument("--port", type=int, default=4318)
    args = parser.parse_args()
    with ThreadingHTTPServer(("127.0.0.1", args.port), Sink) as server:
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            print(f"exports {Sink.exports}, bytes {Sink.received}", flush=True)


if __name__ == "__main__":
    main()
