"""`python -m app serve --workers N` starts N worker processes behind one port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TestServeWorkers:
    def test_two_workers_serve_one_port(self, database_url: str) -> None:
        port = free_port()
        env = {**os.environ, "DATABASE_URL": database_url, "LOG_LEVEL": "WARNING"}
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app",
                "serve",
                "--workers",
                "2",
                "--no-seed",
                "--port",
                str(port),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            ready = None
            while time.monotonic() < deadline:
                try:
                    ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
                    if ready.status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.3)
            assert ready is not None and ready.json()["status"] == "ok"
            workers = [
                c
                for c in psutil.Process(proc.pid).children(recursive=True)
                if "spawn_main" in " ".join(c.cmdline())
            ]
            assert len(workers) == 2
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
