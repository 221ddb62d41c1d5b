"""Advisory lock keys: one per feature, and Alembic's env.py agrees with the list."""

from __future__ import annotations

import re
from pathlib import Path

from app.db import lock_keys

ENV_PY = Path(__file__).parents[2] / "app" / "migrations" / "env.py"


def _keys() -> dict[str, int]:
    return {name: value for name, value in vars(lock_keys).items() if name.isupper()}


def test_every_feature_has_a_key_of_its_own() -> None:
    keys = _keys()
    assert len(keys) >= 5
    assert len(set(keys.values())) == len(keys), keys


def test_the_migrations_take_the_listed_key() -> None:
    found = re.search(r"^MIGRATION_LOCK_KEY = ([\d_]+)$", ENV_PY.read_text(), re.M)
    assert found is not None
    assert int(found.group(1)) == lock_keys.MIGRATIONS


def test_the_features_take_their_listed_keys() -> None:
    from app.analytics.sweep import OUTCOMES_LOCK_KEY
    from app.db.migrate import FUNCTIONS_LOCK_KEY, SETUP_LOCK_KEY
    from app.db.retention import RETENTION_LOCK_KEY

    taken = [SETUP_LOCK_KEY, FUNCTIONS_LOCK_KEY, OUTCOMES_LOCK_KEY, RETENTION_LOCK_KEY]
    assert len(set(taken)) == len(taken)
    assert set(taken) <= set(_keys().values())
