from __future__ import annotations

from app.db.migrate import current_revision, head_revision, migrate


class TestMigrations:
    def test_database_is_at_head(self, database_url: str) -> None:
        assert current_revision(database_url) == head_revision()

    async def test_migrate_twice_is_a_no_op(self, database_url: str) -> None:
        await migrate(database_url)
        assert current_revision(database_url) == head_revision()


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
