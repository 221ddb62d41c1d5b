"""Random, overlapping faults from a seed, each logged with when it started and ended.

A new fault starts every `gap_s` on average (exponential gaps), chosen by weight among the
kinds asked for, on a target that is not already under a fault of its own: one replica
(kill -9 then restart, or SIGSTOP past its lease then SIGCONT), Postgres (restart fast or
immediate, pg_terminate_backend of random backends), PgBouncer (restart), the model (hangs,
drips, truncates or 500s for a while) or the clients (streams cut mid-way for a while).
Each pool keeps one replica running, so the load goes on; everything else may overlap.

Network faults (netproxy.py) hit one path of one replica: its path to PgBouncer gets
latency, resets after a few bytes, a black hole (its connections stranded for good), lost
replies to COMMIT, or a partition (new connections refused, open ones silent) for one to
three leases, while its clients still reach it; its path to the model gets slow and thin;
the webhook workers' path to the receiver gets black-holed. Latency, resets, black holes
and lost replies also hit a `confirm` replica's path to an action server (a third of them,
when one is free): there a lost reply is the answer to a tool call or a POST, the write
applied and its result never heard.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import psycopg

from tests.chaos.client import Cuts
from tests.chaos.model import ChaosModel
from tests.chaos.netproxy import Path
from tests.chaos.records import now
from tests.chaos.topology import LEASE_TTL_S, ChaosDeployment, Replica

# kind: weight
WEIGHTS = {
    "kill9": 3,
    "sigstop": 3,
    "pg_restart_fast": 1,
    "pg_restart_immediate": 1,
    "pg_terminate_backends": 2,
    "pgbouncer_restart": 1,
    "model_hang": 1,
    "model_drip": 1,
    "model_truncate": 1,
    "model_http_500": 1,
    "client_cut": 2,
    "net_latency": 2,
    "net_reset": 1,
    "net_blackhole": 2,
    "net_lost_reply": 2,
    "net_partition": 1,
    "net_slow_model": 1,
    "net_webhook_blackhole": 1,
}
# What a fault takes away while it lasts, for excusing a 5xx: the database, or a replica.
DATABASE_FAULTS = ("pg_restart_fast", "pg_restart_immediate", "pg_terminate_backends",
                   "pgbouncer_restart")  # fmt: skip
REPLICA_FAULTS = ("kill9", "sigstop")
WRITE_RECORDED = b"INSERT INTO tool_executions"
# On one replica's path to the database: that replica's requests may fail meanwhile.
NET_DATABASE_FAULTS = ("net_latency", "net_reset", "net_blackhole", "net_lost_reply",
                       "net_partition")  # fmt: skip
# The kinds that may hit a path to an action server instead, and how often they do.
NET_ACTION_FAULTS = ("net_latency", "net_reset", "net_blackhole", "net_lost_reply")
ACTION_PATH_SHARE = 1 / 3
# A lost reply on an action path: the answer to a write's request (MCP, HTTP).
ACTION_WRITES = {"mcp": b'"tools/call"', "http": b"POST /refund-requests"}


@dataclass
class Fault:
    kind: str
    target: str
    started: float  # monotonic
    ended: float | None = None
    note: str = ""


class Injector:
    def __init__(
        self,
        deployment: ChaosDeployment,
        model: ChaosModel,
        cuts: Cuts,
        seed: int,
        kinds: list[str],
        gap_s: float,
        action_share: float = ACTION_PATH_SHARE,
    ) -> None:
        self.deployment = deployment
        self.model = model
        self.cuts = cuts
        self.random = random.Random(seed)
        self.kinds = kinds
        self.gap_s = gap_s
        self.action_share = action_share
        self.log: list[Fault] = []
        self._busy: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    # --- the schedule --------------------------------------------------------------------

    async def run(self, seconds: float) -> None:
        """Start faults until `seconds` have passed; then wait for those under way."""
        until = now() + seconds
        while True:
            await asyncio.sleep(self.random.expovariate(1 / self.gap_s))
            if now() >= until:
                break
            self._start_one()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _start_one(self) -> None:
        weights = [WEIGHTS[k] for k in self.kinds]
        for _ in range(5):  # a few picks, in case the first one's target is busy
            kind = self.random.choices(self.kinds, weights)[0]
            started = self._plan(kind)
            if started is not None:
                task = asyncio.create_task(started)
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                return

    def _plan(self, kind: str) -> Coroutine[Any, Any, None] | None:
        """The fault's coroutine, or None when its target is busy."""
        if kind in NET_DATABASE_FAULTS or kind == "net_slow_model":
            return self._plan_net(kind)
        if kind in REPLICA_FAULTS:
            replica = self._free_replica()
            if replica is None:
                return None
            if kind == "kill9":
                return self._hold(replica.name, kind, lambda f: self._kill9(replica, f))
            return self._hold(replica.name, kind, lambda f: self._sigstop(replica, f))
        target, action = self._other(kind)
        if target in self._busy:
            return None
        return self._hold(target, kind, action)

    def _plan_net(self, kind: str) -> Coroutine[Any, Any, None] | None:
        """A fault on one replica's path. A path that takes the database away (black
        hole, partition) leaves each pool at least one replica whose path is whole."""
        cutting = kind in ("net_blackhole", "net_partition")
        free: list[Path] = []
        for pool in ("confirm", "direct"):
            replicas = self.deployment.pool(pool)
            whole = [r for r in replicas if not {r.name, r.db.name} & self._busy]
            for r in replicas:
                path = r.model if kind == "net_slow_model" else r.db
                if path.name in self._busy or (cutting and len(whole) < 2):
                    continue
                free.append(path)
        if kind in NET_ACTION_FAULTS and self.random.random() < self.action_share:
            actions = [
                p for r in self.deployment.replicas for p in r.actions if p.name not in self._busy
            ]
            free = actions or free
        if not free:
            return None
        path = self.random.choice(free)
        return self._hold(path.name, kind, lambda f: self._net(kind, path, f))

    def _other(self, kind: str) -> tuple[str, Callable[[Fault], Awaitable[None]]]:
        if kind.startswith("pg_restart"):
            return "postgres", lambda f: self._pg_restart(kind.rsplit("_", 1)[-1], f)
        if kind == "pg_terminate_backends":
            # Not a target of its own: backends die while anything else goes on.
            return f"backends-{len(self.log)}", self._terminate
        if kind == "pgbouncer_restart":
            return "pgbouncer", self._bouncer_restart
        if kind.startswith("model_"):
            return "model", lambda f: self._model(kind.removeprefix("model_"), f)
        if kind == "net_webhook_blackhole":
            hooks = self.deployment.webhooks
            assert hooks is not None
            return hooks.name, lambda f: self._net(kind, hooks, f)
        return "clients", self._cut

    def _free_replica(self) -> Replica | None:
        free = []
        for pool in ("confirm", "direct"):
            replicas = self.deployment.pool(pool)
            up = [r for r in replicas if not {r.name, r.db.name} & self._busy]
            if len(up) >= 2:  # one stays up in each pool
                free += up
        return self.random.choice(free) if free else None

    async def _hold(
        self, target: str, kind: str, action: Callable[[Fault], Awaitable[None]]
    ) -> None:
        self._busy.add(target)
        fault = Fault(kind, target, now())
        self.log.append(fault)
        try:
            await action(fault)
        except Exception as error:  # a fault that could not be done is logged, not fatal
            fault.note = f"failed: {error!r}"[:300]
        finally:
            fault.ended = now()
            self._busy.discard(target)

    # --- the faults ----------------------------------------------------------------------

    async def _kill9(self, replica: Replica, fault: Fault) -> None:
        await asyncio.to_thread(replica.kill9)
        await asyncio.sleep(self.random.uniform(0.5, 4.0))
        await self._start_replica(replica)

    async def _start_replica(self, replica: Replica) -> None:
        for _ in range(10):  # its start waits for the database, which may be down meanwhile
            try:
                await asyncio.to_thread(replica.start, 60.0)
                return
            except (RuntimeError, TimeoutError):
                await asyncio.to_thread(replica.kill9)
                await asyncio.sleep(1)
        raise RuntimeError(f"{replica.name} did not start again")

    async def _sigstop(self, replica: Replica, fault: Fault) -> None:
        pid = replica.pid
        if pid is None:
            raise RuntimeError("not running")
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(LEASE_TTL_S * self.random.uniform(1.3, 2.5))
        finally:
            os.kill(pid, signal.SIGCONT)

    async def _pg_restart(self, mode: str, fault: Fault) -> None:
        down_s = self.random.uniform(0.0, 2.0)
        fault.note = f"down {down_s:.1f}s"
        await asyncio.to_thread(self.deployment.postgres.restart, mode, down_s=down_s)  # type: ignore[arg-type]

    async def _terminate(self, fault: Fault) -> None:
        share = self.random.uniform(0.2, 1.0)
        sql = (
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
            " AND random() < %s"
        )

        def terminate() -> int:
            with psycopg.connect(self.deployment.postgres.admin_url, autocommit=True) as conn:
                row = conn.execute(sql, (share,)).fetchone()
            return int(row[0]) if row else 0

        fault.note = f"{await asyncio.to_thread(terminate)} backends"

    async def _bouncer_restart(self, fault: Fault) -> None:
        bouncer = self.deployment.pgbouncer
        await asyncio.to_thread(bouncer.stop)
        await asyncio.sleep(self.random.uniform(0.0, 2.0))
        await asyncio.to_thread(bouncer.start)

    async def _model(self, kind: str, fault: Fault) -> None:
        self.model.fault = kind
        try:
            await asyncio.sleep(self.random.uniform(3.0, 10.0))
        finally:
            self.model.fault = None

    async def _cut(self, fault: Fault) -> None:
        seconds = self.random.uniform(2.0, 6.0)
        self.cuts.arm(seconds, self.random.uniform(0.3, 1.0))
        await asyncio.sleep(seconds)
        self.cuts.disarm()

    async def _net(self, kind: str, path: Path, fault: Fault) -> None:
        r = self.random
        lost, resets = path.stats.lost_replies, path.stats.resets
        if kind == "net_latency":
            fixed, jitter = r.uniform(0.02, 0.2), r.uniform(0.0, 0.05)
            fault.note = f"{fixed * 1000:.0f} ms + {jitter * 1000:.0f} ms jitter each way"
            await asyncio.to_thread(path.latency, (fixed, jitter), (fixed, jitter))
            seconds = r.uniform(3.0, 10.0)
        elif kind == "net_reset":
            n = r.randint(100, 20000)
            fault.note = f"reset after {n} bytes"
            await asyncio.to_thread(path.reset_after, n)
            seconds = r.uniform(0.5, 3.0)
        elif kind in ("net_blackhole", "net_webhook_blackhole"):
            await asyncio.to_thread(lambda: path.blackhole(strand=True))
            seconds = r.uniform(2.0, 8.0)
        elif kind == "net_lost_reply" and path.name.split()[-1] in ACTION_WRITES:
            # The write went out and was applied; its answer never comes back.
            after = None
            await asyncio.to_thread(path.lost_reply, ACTION_WRITES[path.name.split()[-1]])
            seconds = r.uniform(3.0, 8.0)
        elif kind == "net_lost_reply":
            # Half of them lose a write's COMMIT reply (its statements go out with it),
            # the others whichever COMMIT comes first (a run's closing, a checkpoint).
            after = WRITE_RECORDED if r.random() < 0.5 else None
            await asyncio.to_thread(path.lost_reply, b"COMMIT", after)
            seconds = r.uniform(3.0, 8.0)
        elif kind == "net_partition":
            await asyncio.to_thread(lambda: path.partition(strand=True))
            seconds = LEASE_TTL_S * r.uniform(1.0, 3.0)
        else:  # net_slow_model
            delay, rate = r.uniform(0.1, 0.4), r.uniform(2000, 8000)
            fault.note = f"{delay * 1000:.0f} ms down, {rate / 1000:.1f} kB/s"
            await asyncio.to_thread(path.latency, (0.0, 0.0), (delay, 0.1))
            await asyncio.to_thread(path.bandwidth, rate)
            seconds = r.uniform(3.0, 10.0)
        try:
            await asyncio.sleep(seconds)
        finally:
            await asyncio.to_thread(path.heal)
        if kind == "net_lost_reply":
            fault.note = f"{path.stats.lost_replies - lost} {'write ' if after else ''}replies lost"
            if path.name.split()[-1] in ACTION_WRITES:
                fault.note = f"{path.stats.lost_replies - lost} write answers lost"
        elif kind == "net_reset":
            fault.note += f", {path.stats.resets - resets} connections reset"

    # --- afterwards ----------------------------------------------------------------------

    async def restore(self) -> None:
        """Everything back up, whatever a fault left behind (a fault that failed half-way)."""
        self.model.fault = None
        self.cuts.disarm()
        deployment = self.deployment
        for path in deployment.net.paths.values():
            await asyncio.to_thread(path.heal)
        if not deployment.postgres.running:
            await asyncio.to_thread(deployment.postgres.start)
        if deployment.pgbouncer.pid is None:
            await asyncio.to_thread(deployment.pgbouncer.start)
        for replica in deployment.replicas:
            if replica.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(replica.pid, signal.SIGCONT)
            else:
                await self._start_replica(replica)

    def counts(self) -> Counter[str]:
        return Counter(f.kind for f in self.log)

    def last_end(self) -> float:
        return max((f.ended or now() for f in self.log), default=now())
