"""docker-compose.yml's topology, started from processes: no Docker engine needed.

A private PostgreSQL (a copy of the migrated template: the migrations ran once, directly,
as the compose file's one-shot `migrate` does), PgBouncer in transaction mode with
deploy/pgbouncer/pgbouncer.ini's settings, N service replicas on it
(DB_PREPARE_THRESHOLD=none; each one's start finds the schema at head and takes no lock),
and HAProxy with deploy/haproxy.cfg in front. Every process is started on a free port and
stopped by its own pid (tests/faults/procs.py).

    with Deployment(3, model_url) as deployment:
        httpx.post(deployment.url + "/threads/s1/messages", ...)
        deployment.services[1].kill9()
"""

from __future__ import annotations

import configparser
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Self

from app.api.auth import issue_token
from app.identity import Role
from tests.faults import procs

PGBOUNCER_INI = procs.REPO_ROOT / "deploy" / "pgbouncer" / "pgbouncer.ini"
# Where PgBouncer listens and how it authenticates are the test's own (procs.PgBouncer).
PGBOUNCER_LOCAL = {"listen_addr", "listen_port", "unix_socket_dir", "auth_type", "auth_file"}
JWT_SECRET = "scale-test-secret-scale-test-secret-0123456789"
MODEL = "gpt-4o-mini"


def pgbouncer_settings(path: Path = PGBOUNCER_INI) -> dict[str, str]:
    """The deployed [pgbouncer] settings, less where it listens and how it authenticates."""
    ini = configparser.ConfigParser(comment_prefixes=(";", "#"), inline_comment_prefixes=None)
    ini.read(path)
    return {k: v for k, v in ini["pgbouncer"].items() if k not in PGBOUNCER_LOCAL}


def service_env(database_url: str, model_url: str, **extra: str) -> dict[str, str]:
    """A replica's environment, as docker-compose.yml's `app` service has it."""
    return {
        "DATABASE_URL": database_url,
        "DB_PREPARE_THRESHOLD": "none",
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "test",
        "LLM_MODEL": MODEL,
        "LLM_PROVIDER": "openai",
        "LLM_MAX_RETRIES": "0",
        "JWT_SECRET": JWT_SECRET,
        "OBSERVATION_FORMAT": "json",
        "TRUSTED_PROXIES": "127.0.0.1",
        "LOG_LEVEL": "WARNING",
        **extra,
    }


def bearer(user_id: str) -> dict[str, str]:
    role: Role = "guest" if user_id.startswith("guest-") else "customer"
    token = issue_token(JWT_SECRET, user_id, role=role, ttl_s=24 * 3600)
    return {"Authorization": f"Bearer {token}"}


class Deployment:
    """Postgres, PgBouncer, `replicas` services and HAProxy; `.url` is the load balancer."""

    def __init__(self, replicas: int, model_url: str, **env: str) -> None:
        self.replicas = replicas
        self.model_url = model_url
        self.env = env
        self.pg: procs.PrivatePostgres | None = None
        self.bouncer: procs.PgBouncer | None = None
        self.services: list[procs.ServiceProcess] = []
        self.lb: procs.HAProxy | None = None

    @property
    def url(self) -> str:
        assert self.lb is not None
        return self.lb.url

    @property
    def postgres(self) -> procs.PrivatePostgres:
        assert self.pg is not None
        return self.pg

    def start(self) -> None:
        self.pg = procs.PrivatePostgres(copy_of=procs.migrated_template())
        self.pg.start()
        self.bouncer = procs.PgBouncer(self.pg.url, extra=pgbouncer_settings())
        self.bouncer.start()
        env = service_env(self.bouncer.url, self.model_url, **self.env)
        self.services = [procs.ServiceProcess(env) for _ in range(self.replicas)]
        with ThreadPoolExecutor(self.replicas) as pool:  # together, as `--scale` starts them
            list(pool.map(lambda s: s.start(), self.services))
        self.lb = procs.HAProxy([s.port for s in self.services])
        self.lb.start()

    def pids(self) -> dict[str, int]:
        """Every process of the deployment by role (for CPU accounting)."""
        found: dict[str, int] = {}
        for i, service in enumerate(self.services):
            if service.pid is not None:
                found[f"service {i + 1}"] = service.pid
        others = {"postgres": self.pg, "pgbouncer": self.bouncer, "haproxy": self.lb}
        for name, proc in others.items():
            if proc is not None and proc.pid is not None:
                found[name] = proc.pid
        return found

    def cleanup(self) -> None:
        for proc in [self.lb, *self.services, self.bouncer, self.pg]:
            if proc is not None:
                proc.cleanup()

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()
