"""Alembic environment: plain-SQL migrations over psycopg, guarded by an advisory lock."""

from __future__ import annotations

import time

from alembic import context
from sqlalchemy import create_engine, text

# Any constant works; it only has to be the same for every replica.
MIGRATION_LOCK_KEY = 727_001

config = context.config
url = config.get_main_option("sqlalchemy.url")
assert url, "sqlalchemy.url must be set by app.db.migrate"

engine = create_engine(url)
with engine.connect() as connection:
    # Session-level lock, taken before alembic reads the version table, so two replicas
    # starting at once apply migrations one after the other instead of racing. Polled rather
    # than waited on: a session blocked inside pg_advisory_lock holds a snapshot, and the
    # checkpointer's CREATE INDEX CONCURRENTLY in another replica would wait for it forever.
    while not connection.execute(
        text("SELECT pg_try_advisory_lock(:k)"), {"k": MIGRATION_LOCK_KEY}
    ).scalar():
        connection.commit()
        time.sleep(0.2)
    connection.commit()
    try:
        context.configure(connection=connection, transactional_ddl=True)
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()
    finally:
        connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK_KEY})
        connection.commit()
engine.dispose()
