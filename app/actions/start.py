"""Opening the actions file's sources at start (`ACTIONS_FILE`): the lifespan's one call."""

from __future__ import annotations

from collections.abc import Collection
from contextlib import AsyncExitStack
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from app.actions.catalog import Actions
from app.actions.file import load_actions_file
from app.config import Settings

log = structlog.get_logger(__name__)


async def open_actions(
    settings: Settings,
    pool: AsyncConnectionPool[Any],
    taken: Collection[str],
    stack: AsyncExitStack,
) -> Actions | None:
    """The sources, open (closed with `stack`); None without an actions file. A file that
    cannot be used stops the start with its error (ActionsFileError, ActionsError), which
    names the line or the tool; a source that does not answer does not."""
    if not settings.actions_file:
        return None
    file = load_actions_file(settings.actions_file)
    actions = await Actions.open(pool, file, taken)
    stack.push_async_callback(actions.close)
    log.info(
        "actions",
        sources={s.settings.name: s.status for s in actions.sources},
        tools=len(actions.tools),
    )
    return actions
