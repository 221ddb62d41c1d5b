"""The fault-test processes themselves: each starts, serves, and stops by its own pid."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import psycopg

from tests.faults import procs


class TestPrivatePostgres:
    def test_restart_keeps_port_and_data(self, private_postgres: procs.PrivatePostgres) -> None:
        before = private_postgres.pid
        private_postgres.restart(mode="fast")
        assert private_postgres.pid != before
        assert private_postgres.query("SELECT count(*) FROM alembic_version") == [(1,)]

    def test_terminate_backends_by_application_name(
        self, private_postgres: procs.PrivatePostgres
    ) -> None:
        with (
            psycopg.connect(private_postgres.url, application_name="victim") as victim,
            psycopg.connect(private_postgres.url, application_name="bystander") as bystander,
        ):
            assert private_postgres.terminate_backends("victim") == 1
            bystander.execute("SELECT 1")
            try:
                victim.execute("SELECT 1")
            except psycopg.OperationalError:
                pass
            else:
                raise AssertionError("the terminated backend still answered")


class TestPgBouncer:
    def test_transaction_pooling_in_front_of_postgres(self, pgbouncer: procs.PgBouncer) -> None:
        with psycopg.connect(pgbouncer.url, prepare_threshold=None) as conn:
            row = conn.execute("SHOW transaction_isolation").fetchone()
        assert row is not None
        assert pgbouncer.pid is not None


class TestServiceProcess:
    def test_serves_on_private_postgres(
        self, service: procs.ServiceProcess, auth_headers: Callable[[str], dict[str, str]]
    ) -> None:
        ready = httpx.get(service.url + "/readyz", timeout=5)
        assert ready.json()["database"] == "ok"
        listed = httpx.get(service.url + "/threads", headers=auth_headers("cust_1"), timeout=5)
        assert listed.status_code == 200
