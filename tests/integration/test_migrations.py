from __future__ import annotations

from app.db.migrate import current_revision, head_revision, migrate


class TestMigrations:
    def test_database_is_at_head(self, database_url: str) -> None:
        assert current_revision(database_url) == head_revision()

    async def test_migrate_twice_is_a_no_op(self, database_url: str) -> None:
        await migrate(database_url)
        assert current_revision(database_url) == head_revision()
