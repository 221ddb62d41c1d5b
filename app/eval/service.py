"""The service under evaluation: `python -m app serve --no-seed` as a child process, one per
worker database, logging to a file. Stopped by its own process id."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

import app

APP_ROOT = Path(app.__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServiceProcess:
    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.port = free_port()
        self.log_path = log_path
        self.env = {**os.environ, "PYTHONPATH": str(APP_ROOT), "PYTHONUNBUFFERED": "1", **env}
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        argv = [sys.executable, "-m", "app", "serve", "--no-seed"]
        argv += ["--host", "127.0.0.1", "--port", str(self.port)]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            self._proc = subprocess.Popen(
                argv,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C reaches it through us, not twice
            )

    async def wait_ready(self, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(timeout=2) as http:
            while time.monotonic() < deadline:
                if not self.running:
                    raise RuntimeError(f"the service exited; its log:\n{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(self.url + "/readyz")).status_code == 200:
                        return
                await asyncio.sleep(0.2)
        raise TimeoutError(f"the service was not ready in {timeout_s:.0f} s:\n{self.log_tail()}")

    async def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM (uvicorn's graceful shutdown), SIGKILL if it has not exited in time."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            await asyncio.to_thread(proc.wait, timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            await asyncio.to_thread(proc.wait, 10)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
