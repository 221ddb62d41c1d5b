"""The soak's deployment: tests/scale's topology, with a second pool of replicas.

A private PostgreSQL (a copy of the migrated template), PgBouncer with deploy/pgbouncer's
settings, and two pools of replicas on it, each behind its own HAProxy (deploy/haproxy.cfg):
`confirm`, three replicas that ask the customer before every write, and `direct`, two that
do not (WRITE_CONFIRMATION=off is a service-wide setting, and a thread may be served by any
replica of its balancer, so the two kinds never share one). Every process logs into the
soak's output folder and is stopped by its own pid.

Every network path of a replica goes through the fault proxy (netproxy.py), a path of its
own each: the replica to PgBouncer (`replica.db`), to the model (`replica.model`), and the
webhook workers to the soak's receiver (`deployment.webhooks`, one path for all), and each
`confirm` replica to the two action servers (`replica.actions`: MCP and HTTP, actions.py).
A path's fault is one replica's alone: its clients still reach it through the balancer.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path as FilePath
from types import TracebackType
from typing import Self

import psycopg

from tests.chaos.actions import ActionServers
from tests.chaos.netproxy import NetProxy, Path
from tests.faults import procs
from tests.scale.topology import pgbouncer_settings, service_env

LEASE_TTL_S = 3.0
# When the replica's kernel would find a silent database connection dead (TCP keepalives
# 2 s idle + 2 probes 1 s apart; TCP_USER_TIMEOUT 5 s): the proxy resets a connection it
# stranded this long after (its own kernel acknowledges every byte, so no kernel would).
KERNEL_GIVES_UP_S = 5.0
# Short enough that a fault's damage is over in seconds, so the soak settles quickly: a
# dead owner's lease, a silent model, a stalled stream, a heartbeat a client can wait for.
SOAK_ENV = {
    "THREAD_LEASE_TTL_S": str(LEASE_TTL_S),
    "SSE_HEARTBEAT_S": "2",
    "LLM_TIMEOUT_S": "3",
    "LLM_CALL_DEADLINE_S": "8",
    "TURN_DEADLINE_S": "40",
    "DB_POOL_TIMEOUT_S": "2",
    "DB_POOL_MAX": "10",
    # A connection the proxy black-holes is cut this long into its use; a connection
    # attempt to a silent path gives up after 2 s (libpq's least).
    "DB_CALL_DEADLINE_S": "10",
    "DB_CONNECT_TIMEOUT_S": "2",
    "DB_KEEPALIVES_IDLE_S": "2",
    "DB_KEEPALIVES_INTERVAL_S": "1",
    "DB_KEEPALIVES_COUNT": "2",
    "DB_TCP_USER_TIMEOUT_MS": str(int(KERNEL_GIVES_UP_S * 1000)),
    # Handoff webhooks to the soak's receiver: a silent receiver is given up on after 3 s
    # and tried again within 5 s, so a delivery held by a fault is done soon after it.
    "HANDOFF_WEBHOOK_SECRET": "chaos-webhook-secret-0123456789abcdef",
    "HANDOFF_WEBHOOK_TIMEOUT_S": "3",
    "HANDOFF_WEBHOOK_BACKOFF_CAP_S": "5",
    # The customers post far more often than a person: the limits are not under test.
    "RATE_LIMIT_POSTS_PER_MINUTE": "100000",
    "RATE_LIMIT_POSTS_BURST": "100000",
    "RATE_LIMIT_THREADS_PER_HOUR": "10000000",
    "RATE_LIMIT_THREADS_BURST": "100000",
}
POOLS = {"confirm": ("required", 3), "direct": ("off", 2)}


class Replica(procs.ServiceProcess):
    def __init__(
        self,
        env: dict[str, str],
        pool: str,
        index: int,
        log_dir: FilePath,
        paths: tuple[Path, Path],
        actions: tuple[Path, ...] = (),
    ) -> None:
        super().__init__(env, log_dir=log_dir)
        self.pool = pool
        self.name = f"{pool}-{index} :{self.port}"
        self.db, self.model = paths
        self.actions = actions  # (to the MCP server, to the HTTP one); none in `direct`


def via(url: str, path: Path) -> str:
    """`url` with its host and port replaced by the path's listener."""
    scheme, _, rest = url.partition("://")
    userinfo, at, hostpart = rest.rpartition("@")
    _, slash, tail = hostpart.partition("/")
    return f"{scheme}://{userinfo}{at}{path.address}{slash}{tail}"


def host_port(url: str) -> tuple[str, int]:
    address = url.partition("://")[2].rpartition("@")[2].partition("/")[0]
    host, _, port = address.rpartition(":")
    return host, int(port)


class ChaosDeployment:
    def __init__(self, model_url: str, log_dir: FilePath, webhook_port: int, seed: int = 0) -> None:
        self.model_url = model_url
        self.log_dir = log_dir
        self.webhook_port = webhook_port
        self.pg: procs.PrivatePostgres | None = None
        self.bouncer: procs.PgBouncer | None = None
        self.replicas: list[Replica] = []
        self.balancers: dict[str, procs.HAProxy] = {}
        self.net = NetProxy(seed)
        self.webhooks: Path | None = None
        self.actions: ActionServers | None = None

    @property
    def postgres(self) -> procs.PrivatePostgres:
        assert self.pg is not None
        return self.pg

    @property
    def pgbouncer(self) -> procs.PgBouncer:
        assert self.bouncer is not None
        return self.bouncer

    def url(self, pool: str) -> str:
        return self.balancers[pool].url

    def pool(self, name: str) -> list[Replica]:
        return [r for r in self.replicas if r.pool == name]

    def start(self) -> None:
        self.pg = procs.PrivatePostgres(copy_of=procs.migrated_template())
        self.pg.start()
        # The private cluster runs with synchronous_commit=off (fast for tests); a restart
        # in immediate mode would then lose commits it had acknowledged, which no service
        # can be held to. Every session of the soak's database commits durably.
        with psycopg.connect(self.pg.admin_url, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{self.pg.dbname}" SET synchronous_commit = on')
        self.bouncer = procs.PgBouncer(self.pg.url, extra=pgbouncer_settings())
        self.bouncer.start()
        self.net.start()
        self.webhooks = self.net.path("webhooks", ("127.0.0.1", self.webhook_port))
        hook = f"http://{self.webhooks.address}/hooks"
        # The customer confirms an external write: the `confirm` pool has the actions.
        self.actions = ActionServers.start(self.log_dir)
        for pool, (confirmation, count) in POOLS.items():
            for i in range(count):
                db = self.net.path(f"{pool}-{i} db", host_port(self.bouncer.url), KERNEL_GIVES_UP_S)
                model = self.net.path(f"{pool}-{i} model", host_port(self.model_url))
                actions: tuple[Path, ...] = ()
                extra: dict[str, str] = {}
                if pool == "confirm":
                    mcp = self.net.path(f"{pool}-{i} mcp", ("127.0.0.1", self.actions.mcp.port))
                    http = self.net.path(f"{pool}-{i} http", ("127.0.0.1", self.actions.http.port))
                    actions = (mcp, http)
                    extra = self.actions.env(mcp.address, http.address)
                env = service_env(
                    via(self.bouncer.url, db),
                    via(self.model_url, model),
                    WRITE_CONFIRMATION=confirmation,
                    HANDOFF_WEBHOOK_URL=hook,
                    **SOAK_ENV,
                    **extra,
                )
                self.replicas.append(Replica(env, pool, i, self.log_dir, (db, model), actions))
        with ThreadPoolExecutor(len(self.replicas)) as threads:
            list(threads.map(lambda r: r.start(), self.replicas))
        for pool in POOLS:
            lb = procs.HAProxy([r.port for r in self.pool(pool)])
            lb.start()
            self.balancers[pool] = lb

    def logs(self) -> dict[str, FilePath]:
        found: dict[str, FilePath] = {r.name: r.log_path for r in self.replicas}
        for name, proc in [("postgres", self.pg), ("pgbouncer", self.bouncer)]:
            if proc is not None:
                found[name] = proc.log_path
        return found

    def cleanup(self) -> None:
        for proc in [*self.balancers.values(), *self.replicas, self.bouncer, self.pg]:
            if proc is not None:
                proc.cleanup()
        if self.actions is not None:
            self.actions.cleanup()
        self.net.stop()

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
