"""Where the trials run: a template database holding the fresh shop, and per worker a copy of
it (CREATE DATABASE ... TEMPLATE) with its own service process.

Between trials a worker's shop is put back to the fresh data: the rows the last trial
changed are written back, or (when that is unknown, or a lot) all of it is loaded again with
`import_data(replace=True)`, as `data import --replace` does. The expected data of
every task is computed on the template, in transactions that are rolled back.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from app.api.auth import issue_token
from app.db.migrate import migrate
from app.db.transfer import TauData, import_data
from app.eval.gold import Gold, gold_state
from app.eval.service import ServiceProcess
from app.eval.snapshot import RowDiff, Snapshot, diff, read_snapshot, restore
from app.eval.tasks import Task

Progress = Callable[[str], None]
# Run on the fresh shop's database before the workers' copies are made (a policy test
# makes the version under test live there: app/eval/policy_gate.py).
Prepare = Callable[[AsyncConnection[Any]], Awaitable[None]]
MAX_ROWS_RESTORED = 500
# What every evaluated service is started with, over the environment (and under the caller's
# `service_env`): codes recorded readably in the outbox, and no per-user limits (one customer
# may be played many times in an hour). Each also gets its own database and our JWT secret.
SERVICE_SETTINGS = {
    "APP_ENV": "dev",
    "WEB_WORKERS": "1",
    "LOG_LEVEL": "WARNING",
    "NOTIFY_SENDER": "log",
    "RATE_LIMIT_POSTS_PER_MINUTE": "0",
    "RATE_LIMIT_THREADS_PER_HOUR": "0",
    "TOKEN_BUDGET_PER_DAY": "0",
    "IDENTITY_CODES_PER_HOUR": "100000",
    "DB_POOL_MAX": "8",
}


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


async def connect(url: str) -> AsyncConnection[Any]:
    conn: AsyncConnection[Any] = await AsyncConnection.connect(
        url, autocommit=True, row_factory=dict_row
    )
    return conn


@dataclass
class Worker:
    index: int
    url: str
    service: ServiceProcess
    conn: AsyncConnection[Any] | None = None
    http: httpx.AsyncClient | None = None
    # How the shop differs from the fresh data: None when unknown (a trial broke off).
    changes: list[RowDiff] | None = field(default_factory=list)

    @property
    def db(self) -> AsyncConnection[Any]:
        assert self.conn is not None
        return self.conn

    async def new_mail(self, thread_id: str, after: list[int]) -> list[tuple[str, str]]:
        """Outbox messages for `thread_id` newer than `after[0]` (advanced as read)."""
        cur = await self.db.execute(
            "SELECT id, subject, body FROM outbox WHERE thread_id = %s AND id > %s ORDER BY id",
            (thread_id, after[0]),
        )
        rows = await cur.fetchall()
        if rows:
            after[0] = int(rows[-1]["id"])
        return [(str(r["subject"]), str(r["body"])) for r in rows]

    async def handoffs(self, thread_id: str) -> int:
        cur = await self.db.execute(
            "SELECT count(*) AS n FROM handoff_tickets WHERE thread_id = %s", (thread_id,)
        )
        row = await cur.fetchone()
        return int(row["n"]) if row else 0


@dataclass
class Workbench:
    """Databases and services for `size` workers; an async context manager."""

    server_url: str  # any database on the server; ours are created next to it
    data: TauData
    size: int
    log_dir: Path
    service_env: Mapping[str, str] = field(default_factory=dict)
    progress: Progress = print
    prepare: Prepare | None = None
    request_timeout_s: float = 600.0
    secret: str = field(default_factory=lambda: secrets.token_urlsafe(48))
    workers: list[Worker] = field(default_factory=list)
    baseline: Snapshot = field(default_factory=Snapshot)
    _name: str = field(default_factory=lambda: f"cseval_{uuid.uuid4().hex[:10]}")
    _template: AsyncConnection[Any] | None = None
    _databases: list[str] = field(default_factory=list)

    async def __aenter__(self) -> Self:
        try:
            await self._open()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def token(self, user_id: str, role: str) -> str:
        return issue_token(self.secret, user_id, role=role, ttl_s=24 * 3600)  # type: ignore[arg-type]

    async def gold(self, task: Task) -> Gold:
        assert self._template is not None
        return await gold_state(self._template, task, self.baseline, self.data)

    async def begin(self, worker: Worker, start: Snapshot) -> None:
        """A fresh worker's shop set to a recorded task's records at its start."""
        rows = diff(self.baseline, start, self.baseline)
        if rows:
            worker.changes = None  # unknown until the trial is settled
            await restore(worker.db, rows, start)

    async def settle(self, worker: Worker) -> Snapshot:
        """The worker's shop after a trial; what differs from the fresh data is noted."""
        final = await read_snapshot(worker.db, self.baseline)
        worker.changes = diff(final, self.baseline, self.baseline)
        return final

    async def reset(self, worker: Worker) -> None:
        """Back to the fresh shop: the rows a trial changed, or everything (as `data import
        --replace` does) when what changed is not known or is a lot."""
        changes = worker.changes
        if changes is None or len(changes) > MAX_ROWS_RESTORED:
            await import_data(worker.db, self.data, replace=True)
        elif changes:
            await restore(worker.db, changes, self.baseline)
        worker.changes = []

    async def _open(self) -> None:
        template = f"{self._name}_tpl"
        self.progress(f"preparing the fresh shop in database {template}")
        await self._create(template)
        template_url = with_database(self.server_url, template)
        await migrate(template_url)
        async with await connect(template_url) as conn:
            await import_data(conn, self.data)
            if self.prepare is not None:
                await self.prepare(conn)
        await self._terminate_sessions(template)
        for index in range(self.size):
            name = f"{self._name}_w{index}"
            await self._create(name, template=template)
            env = {
                **SERVICE_SETTINGS,
                **self.service_env,
                "DATABASE_URL": with_database(self.server_url, name),
                "JWT_SECRET": self.secret,
            }
            service = ServiceProcess(env, self.log_dir / f"service-w{index}.log")
            self.workers.append(Worker(index, env["DATABASE_URL"], service))
        self.progress(f"starting {self.size} service process(es)")
        for worker in self.workers:
            worker.service.start()
        await asyncio.gather(*(w.service.wait_ready() for w in self.workers))
        for worker in self.workers:
            worker.conn = await connect(worker.url)
            worker.http = httpx.AsyncClient(
                base_url=worker.service.url, timeout=self.request_timeout_s
            )
        self._template = await connect(template_url)
        self.baseline = await read_snapshot(self._template)

    async def _admin(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        async with await psycopg.AsyncConnection.connect(self.server_url, autocommit=True) as c:
            await c.execute(sql, params)

    async def _create(self, name: str, *, template: str | None = None) -> None:
        clause = f' TEMPLATE "{template}"' if template else ""
        await self._admin(f'CREATE DATABASE "{name}"{clause}')
        self._databases.append(name)

    async def _terminate_sessions(self, name: str) -> None:
        """Our own sessions on our own template (a migration tool's pooled connection) would
        keep CREATE DATABASE ... TEMPLATE from copying it."""
        await self._admin(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )

    async def close(self) -> None:
        for worker in self.workers:
            if worker.http is not None:
                await worker.http.aclose()
            if worker.conn is not None:
                await worker.conn.close()
        await asyncio.gather(*(w.service.stop() for w in self.workers))
        if self._template is not None:
            await self._template.close()
        await asyncio.gather(*(self._drop(name) for name in self._databases))
        self._databases.clear()

    async def _drop(self, name: str) -> None:
        with contextlib.suppress(psycopg.Error):
            await self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
