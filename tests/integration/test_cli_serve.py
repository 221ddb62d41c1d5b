"""`python -m app serve --workers N` starts N worker processes behind one port, each with a
listening socket of its own (SO_REUSEPORT), so connections spread over them, and keeps an idle
connection longer than a proxy in front would."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def worker_connections(proc: subprocess.Popen[bytes], port: int) -> dict[int, int]:
    """Established connections on `port` held by each worker process."""
    counts: dict[int, int] = {}
    for child in psutil.Process(proc.pid).children(recursive=True):
        if "spawn_main" not in " ".join(child.cmdline()):
            continue
        counts[child.pid] = sum(
            1
            for c in child.net_connections(kind="tcp")
            if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == port
        )
    return counts


def healthz_on(c: http.client.HTTPConnection) -> int:
    """GET /healthz on `c`'s connection, read whole; the status. http.client reconnects only
    a connection it closed itself, so one the server closed while idle fails here."""
    c.request("GET", "/healthz")
    response = c.getresponse()
    response.read()
    return response.status


def listening_inodes(port: int) -> set[str]:
    """The inodes of the sockets listening on `port` (Linux: /proc/net/tcp)."""
    found: set[str] = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state == "0A" and int(local.split(":")[1], 16) == port:  # 0A: LISTEN
            found.add(inode)
    return found


def socket_inodes(pid: int) -> set[str]:
    inodes: set[str] = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    return inodes


class TestServeWorkers:
    def test_connections_spread_over_the_workers(self, database_url: str) -> None:
        """100 keep-alive connections opened one after another: with one shared socket the
        warm worker could take most of them; with a socket per worker the kernel spreads
        them by address (each worker well above a fifth: a binomial draw below 20 of 100
        happens about once in a billion)."""
        port = free_port()
        env = {**os.environ, "DATABASE_URL": database_url, "LOG_LEVEL": "WARNING"}
        command = [sys.executable, "-m", "app", "serve", "--workers", "2", "--no-seed"]
        proc = subprocess.Popen(
            [*command, "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        clients: list[http.client.HTTPConnection] = []
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).is_success:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.3)
            time.sleep(1)  # both workers ready
            for _ in range(100):
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                assert healthz_on(c) == 200
                clients.append(c)
            local_ports = [c.sock.getsockname()[1] for c in clients]
            counts = worker_connections(proc, port)
            assert len(counts) == 2 and sum(counts.values()) == 100, counts
            assert min(counts.values()) >= 20, counts
            # each worker listens on a socket of its own (one shared socket would be one)
            listening = listening_inodes(port)
            assert len(listening) == 2, listening
            for pid in counts:
                assert len(socket_inodes(pid) & listening) == 1, pid
            # Idle past uvicorn's own 5 s, every connection still serves: a proxy's pooled
            # connection is not closed under it (HTTP_KEEPALIVE_S, 75 s by default).
            time.sleep(6)
            for c in clients:
                assert healthz_on(c) == 200
            assert [c.sock.getsockname()[1] for c in clients] == local_ports  # the same ones
        finally:
            for c in clients:
                c.close()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()

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
