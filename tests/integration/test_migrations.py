from __future__ import annotations

import psycopg
import pytest

import app.db.migrate
from app.db.migrate import (
    at_head,
    current_revision,
    functions_version,
    head_revision,
    migrate,
    upgrade_domain,
)
from tests.pg import create_fresh_database, drop_database


class TestMigrations:
    def test_database_is_at_head(self, database_url: str) -> None:
        assert current_revision(database_url) == head_revision()

    async def test_migrate_twice_is_a_no_op(self, database_url: str) -> None:
        await migrate(database_url)
        assert current_revision(database_url) == head_revision()


class TestFunctions:
    async def test_changed_functions_are_applied_again_by_migrate(self) -> None:
        """A release that changes app/db/sql/ but adds no migration still brings its
        functions: migrate compares their stored version."""
        url, admin = create_fresh_database("csagent_functions")
        try:
            await migrate(url)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("DROP FUNCTION cs_gcra(text, float8, float8)")
                conn.execute("UPDATE cs_functions SET version = 'an older release'")
            assert not await at_head(url)
            await migrate(url)
            with psycopg.connect(url) as conn:
                row = conn.execute("SELECT * FROM cs_gcra('k', 1, 2)").fetchone()
                version = conn.execute("SELECT version FROM cs_functions").fetchone()
            assert row == (True, None)
            assert version == (functions_version(),) and await at_head(url)
        finally:
            drop_database(admin, url)


class TestConcurrentMigrate:
    def test_three_replicas_migrating_at_once_all_succeed(self) -> None:
        """Separate processes, as replicas are: the advisory lock makes them take turns."""
        import subprocess
        import sys

        from tests.pg import create_fresh_database, drop_database

        url, admin = create_fresh_database("csagent_migrate")
        code = (
            "import asyncio, sys; from app.db.migrate import migrate; "
            "asyncio.run(migrate(sys.argv[1]))"
        )
        try:
            replicas = [
                subprocess.Popen([sys.executable, "-c", code, url], stderr=subprocess.PIPE)
                for _ in range(3)
            ]
            results = [
                (p.wait(timeout=120), p.stderr.read() if p.stderr else b"") for p in replicas
            ]
            assert [rc for rc, _ in results] == [0, 0, 0], results
            assert current_revision(url) == head_revision()
        finally:
            drop_database(admin, url)

    def test_a_lock_held_too_long_fails_with_a_clear_error(
        self, database_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A replica stuck holding the migration lock makes the others give up, not hang."""
        monkeypatch.setattr(app.db.migrate, "LOCK_POLLS", 3)  # 0.6 s instead of 5 minutes
        with psycopg.connect(database_url, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(727001)")  # migrations/env.py's key
            with pytest.raises(TimeoutError, match="migration lock"):
                upgrade_domain(database_url)
        upgrade_domain(database_url)  # released with the holder's session: goes through
