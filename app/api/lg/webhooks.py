"""Run webhooks: `runs.create(..., webhook=URL)` (and `runs.stream`, `runs.wait`). When
the run ends, its final state is POSTed to the URL, at least once, from the handoff
webhooks' outbox and worker (app/notify/webhooks.py), signed the same way.

The URL is checked here, when the run is asked for (WEBHOOK_ALLOWED_HOSTS, resolved now:
a typed 422), and again by the worker at every send. It is stored with the run by one
UPDATE after the run opens, and a trigger enqueues the event in the statement that ends
the run (migration 0020): a run without a webhook does no extra work. The body is the
official server's: the run (`run_id`, `thread_id`, `assistant_id`, `status`, `metadata`,
...), `run_started_at`, `run_ended_at`, `values` (the state the run ended on, with
`__interrupt__` while a confirmation waits) and, for a failed run, `error`.
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool

from app.api.lg.errors import refuse
from app.api.lg.final import final_state, outcome_values
from app.api.lg.run_records import run_record
from app.api.lg.views import RUN_STATUS, run_view
from app.config import Settings
from app.notify.destinations import HostPolicy, RefusedDestination, resolve
from app.notify.webhooks import Render
from app.threads.inspect import ThreadInspector

RUN_LOST = {"error": "run_lost", "message": "the server running it stopped"}


async def checked_webhook(url: str, settings: Settings) -> str:
    """The URL as given, once it may be sent to now; else a typed 422."""
    try:
        await resolve(url, HostPolicy.parse(settings.webhook_allowed_hosts))
    except RefusedDestination as refused:
        refuse(refused.reason, "webhook_url_refused")
    return url


def run_webhook_renderer(pool: AsyncConnectionPool[Any], inspector: ThreadInspector) -> Render:
    """The worker's `render`: a run's outbox row (what the trigger stored) -> the body."""

    async def render(thread_id: str, stored: dict[str, Any]) -> dict[str, Any]:
        row = await run_record(pool, thread_id, str(stored["run_id"]), with_error=True)
        if row is None:
            raise LookupError("the run is gone")  # its thread was deleted: so is the event
        session_id = thread_id.partition(":")[2]
        final = await final_state(inspector, thread_id, stored.get("checkpoint_id"))
        body = {
            **run_view(row, session_id),
            "status": RUN_STATUS.get(str(stored["status"]), "error"),
            "run_started_at": row["created_at"].isoformat(),
            "run_ended_at": stored.get("ended_at"),
            "values": outcome_values(final) if final.values else None,
        }
        if stored["status"] == "abandoned":
            body["error"] = RUN_LOST
        elif (failed := row["error"]) is not None:
            body["error"] = {"error": failed.get("code"), "message": failed.get("message")}
        return body

    return render
