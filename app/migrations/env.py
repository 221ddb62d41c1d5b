"""Alembic environment: plain-SQL migrations over psycopg, guarded by an advisory lock."""

from __future__ import annotations

import time

from alembic import context
from sqlalchemy import create_engine, text

# Any constant works; it only has to be the same for every replica (app/db/lock_keys.py
# lists every key the service takes).
MIGRATION_LOCK_KEY = 727_001

config = context.config
# Set by app.db.migrate.alembic_config (env.py imports nothing of the app).
LOCK_POLL_S: float = config.attributes["lock_poll_s"]
LOCK_POLLS: int = config.attributes["lock_polls"]
url = config.get_main_option("sqlalchemy.url")
assert url, "sqlalchemy.url must be set by app.db.migrate"

engine = create_engine(url)
with engine.connect() as connection:
    # Session-level lock, taken before alembic reads the version table, so two replicas
    # starting at once apply migrations one after the other instead of racing. Polled rather
    # than waited on: a session blocked inside pg_advisory_lock holds a snapshot, and the
    # checkpointer's CREATE INDEX CONCURRENTLY in another replica would wait for it forever.
    # Given up after as long as the checkpointer's setup lock is waited for (five minutes).
    for _ in range(LOCK_POLLS):
        got = connection.execute(
            text("SELECT pg_try_advisory_lock(:k)"), {"k": MIGRATION_LOCK_KEY}
        ).scalar()
        connection.commit()
        if got:
            break
        time.sleep(LOCK_POLL_S)
    else:
        raise TimeoutError("another replica has held the migration lock for too long")
    try:
        context.configure(connection=connection, transactional_ddl=True)
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()
    finally:
        connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK_KEY})
        connection.commit()
engine.dispose()
