"""The soak's deployment: tests/scale's topology, with a second pool of replicas.

A private PostgreSQL (a copy of the migrated template), PgBouncer with deploy/pgbouncer's
settings, and two pools of replicas on it, each behind its own HAProxy (deploy/haproxy.cfg):
`confirm`, three replicas that ask the customer before every write, and `direct`, two that
do not (WRITE_CONFIRMATION=off is a service-wide setting, and a thread may be served by any
replica of its balancer, so the two kinds never share one). Every process logs into the
soak's output folder and is stopped by its own pid.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Self

import psycopg

from tests.faults import procs
from tests.scale.topology import pgbouncer_settings, service_env

LEASE_TTL_S = 3.0
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
    # The customers post far more often than a person: the limits are not under test.
    "RATE_LIMIT_POSTS_PER_MINUTE": "100000",
    "RATE_LIMIT_POSTS_BURST": "100000",
    "RATE_LIMIT_THREADS_PER_HOUR": "10000000",
    "RATE_LIMIT_THREADS_BURST": "100000",
}
POOLS = {"confirm": ("required", 3), "direct": ("off", 2)}


class Replica(procs.ServiceProcess):
    def __init__(self, env: dict[str, str], pool: str, index: int, log_dir: Path) -> None:
        super().__init__(env, log_dir=log_dir)
        self.pool = pool
        self.name = f"{pool}-{index} :{self.port}"


class ChaosDeployment:
    def __init__(self, model_url: str, log_dir: Path) -> None:
        self.model_url = model_url
        self.log_dir = log_dir
        self.pg: procs.PrivatePostgres | None = None
        self.bouncer: procs.PgBouncer | None = None
        self.replicas: list[Replica] = []
        self.balancers: dict[str, procs.HAProxy] = {}

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
        for pool, (confirmation, count) in POOLS.items():
            env = service_env(
                self.bouncer.url, self.model_url, WRITE_CONFIRMATION=confirmation, **SOAK_ENV
            )
            self.replicas += [Replica(env, pool, i, self.log_dir) for i in range(count)]
        with ThreadPoolExecutor(len(self.replicas)) as threads:
            list(threads.map(lambda r: r.start(), self.replicas))
        for pool in POOLS:
            lb = procs.HAProxy([r.port for r in self.pool(pool)])
            lb.start()
            self.balancers[pool] = lb

    def logs(self) -> dict[str, Path]:
        found: dict[str, Path] = {r.name: r.log_path for r in self.replicas}
        for name, proc in [("postgres", self.pg), ("pgbouncer", self.bouncer)]:
            if proc is not None:
                found[name] = proc.log_path
        return found

    def cleanup(self) -> None:
        for proc in [*self.balancers.values(), *self.replicas, self.bouncer, self.pg]:
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
