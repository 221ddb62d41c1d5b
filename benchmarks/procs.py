"""Processes the benchmark starts (model server, services), and the scratch database."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit, urlunsplit

import httpx
import psutil  # type: ignore[import-untyped]

PY = sys.executable
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
JWT_SECRET = "benchmark-secret-0123456789abcdef0123456789"  # a scratch service, not prod


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


@dataclass
class Proc:
    """A child process whose output goes to a log file; stopped with SIGTERM, then SIGKILL."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    ready_url: str | None = None
    popen: subprocess.Popen[bytes] | None = None
    _log_file: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    @property
    def command(self) -> str:
        """The command line as one would type it (benchmark-specific env first)."""
        shown = [f"{k}={v}" for k, v in self.env.items() if k not in os.environ or k in SHOW_ENV]
        args = ["python" if a == PY else a for a in self.argv]
        return " ".join([*shown, *args])

    def start(self, timeout_s: float = 90.0) -> Proc:
        self._log_file = self.log.open("wb")
        self.popen = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env={**os.environ, **self.env},
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        if self.ready_url is not None:
            self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        assert self.popen is not None and self.ready_url is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited: see {self.log}")
            try:
                if httpx.get(self.ready_url, timeout=2).status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {timeout_s:.0f}s: see {self.log}")

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=5)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def cpu_s(self) -> float:
        """CPU seconds of the process and its live children (uvicorn workers)."""
        try:
            process = psutil.Process(self.pid)
            total = 0.0
            for p in [process, *process.children(recursive=True)]:
                t = p.cpu_times()
                total += t.user + t.system
            return total
        except psutil.Error:
            return 0.0

    def rss_mb(self) -> float:
        try:
            return float(psutil.Process(self.pid).memory_info().rss) / 2**20
        except psutil.Error:
            return 0.0


SHOW_ENV = {
    "DATABASE_URL",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "WRITE_CONFIRMATION",
    "LOG_LEVEL",
    "JWT_SECRET",
}


def run_checked(argv: list[str], env: dict[str, str], log: Path, timeout_s: float = 600) -> None:
    with log.open("ab") as f:
        done = subprocess.run(
            argv,
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=f,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): see {log}")


def run_parallel(argvs: list[list[str]], log: Path, timeout_s: float = 600) -> None:
    """Start every command at once and wait for all; fail if any fails."""
    with log.open("ab") as f:
        procs = [
            subprocess.Popen(argv, cwd=ROOT, env=os.environ, stdout=f, stderr=subprocess.STDOUT)
            for argv in argvs
        ]
        codes = [p.wait(timeout=timeout_s) for p in procs]
    if any(codes):
        raise RuntimeError(f"parallel clients failed ({codes}): see {log}")


@dataclass
class RssSampler:
    """Samples a process's RSS every `interval_s` in a thread: [(time.time(), MiB), ...]."""

    pid: int
    interval_s: float = 0.05
    samples: list[tuple[float, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> RssSampler:
        process = psutil.Process(self.pid)

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self.samples.append((time.time(), process.memory_info().rss / 2**20))
                except psutil.Error:
                    return
                self._stop.wait(self.interval_s)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


class CpuWatch:
    """CPU seconds used meanwhile by each named process, and by the whole machine."""

    def __init__(self, procs: dict[str, Proc]) -> None:
        self.procs = procs

    def __enter__(self) -> CpuWatch:
        self.t0 = time.monotonic()
        self.machine0 = _busy_s()
        self.postgres0 = _postgres_cpu_s()
        self.proc0 = {name: p.cpu_s() for name, p in self.procs.items()}
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.monotonic() - self.t0
        self.machine = _busy_s() - self.machine0
        self.postgres = _postgres_cpu_s() - self.postgres0
        self.used = {name: p.cpu_s() - self.proc0[name] for name, p in self.procs.items()}

    def summary(self, extra: dict[str, float] | None = None) -> dict[str, float]:
        """CPU seconds by process, Postgres (all databases), and everything else."""
        used = {**self.used, **(extra or {})}
        other = self.machine - sum(used.values()) - self.postgres
        return {
            **used,
            "postgres": self.postgres,
            "other": max(other, 0.0),
            "elapsed": self.elapsed,
            "machine": self.machine,
        }


def _postgres_cpu_s() -> float:
    total = 0.0
    for p in psutil.process_iter(["name", "cpu_times"]):
        if p.info["name"] == "postgres" and p.info["cpu_times"] is not None:
            total += p.info["cpu_times"].user + p.info["cpu_times"].system
    return total


def _busy_s() -> float:
    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0))
