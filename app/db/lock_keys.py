"""Every advisory lock key the service takes, in one place. Two features on one key wait
for each other, or one skips its work while the other holds the key: the retention sweep
and the functions' set-up once shared 727_003, so a sweep could skip a round while a replica
started, and a replica's start waited for a sweep's batch.

Keys only have to be the same on every replica. A key that changes between releases lets
an old replica and a new one hold "the" lock at once while both run: a key, once shipped,
stays.
"""

from __future__ import annotations

# app/migrations/env.py (which imports nothing of the app) holds its own copy of this one;
# tests/unit/test_lock_keys.py checks that the two agree.
MIGRATIONS = 727_001  # Alembic's upgrade, a session lock
SETUP = 727_002  # the checkpointer's and the store's own set-up, a session lock
FUNCTIONS = 727_003  # app/db/sql/*.sql applied, a transaction lock
OUTCOMES = 727_004  # the analytics outcome sweep, a transaction lock, tried
RETENTION = 727_005  # the retention sweep, a transaction lock, tried (was 727_003)
