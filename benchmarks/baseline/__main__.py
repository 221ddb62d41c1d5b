"""`python -m benchmarks.baseline --port 8300`."""

from __future__ import annotations

import argparse

import uvicorn

from benchmarks.baseline.app import app


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.baseline")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8300)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
