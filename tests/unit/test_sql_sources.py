"""Every live SQL function and trigger has one source, app/db/sql/*.sql; the migrations keep
tables, indexes and the drops a changed signature needs."""

from __future__ import annotations

import re
from pathlib import Path

import app
from app.db.migrate import function_sql

APP_DIR = Path(app.__file__).parent
DEFINES = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?(FUNCTION|TRIGGER)\s+(\w+)", re.I)


class TestOneSource:
    def test_no_migration_defines_a_function_or_a_trigger(self) -> None:
        for path in sorted((APP_DIR / "migrations" / "versions").glob("*.py")):
            found = DEFINES.findall(path.read_text())
            assert not found, f"{path.name} defines {found}: put it in app/db/sql/"

    def test_each_function_and_trigger_is_defined_once(self) -> None:
        names = [name.lower() for _, name in DEFINES.findall(function_sql())]
        assert names and len(names) == len(set(names)), sorted(names)

    def test_the_checkpoint_query_is_upstreams(self) -> None:
        from langgraph.checkpoint.postgres.base import SELECT_SQL

        assert "{upstream_checkpoint_select}" not in function_sql()
        assert SELECT_SQL in function_sql()
