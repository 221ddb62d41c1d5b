"""The state a run ended on, as `values` (the last of its stream, /wait, /join and its
webhook): the transcript at the run's last checkpoint and the interrupts waiting in it."""

from __future__ import annotations

from typing import Any

from app.api.lg.translate import Final, interrupts_of
from app.api.lg.views import transcript
from app.threads.inspect import ThreadInspector


async def final_state(
    inspector: ThreadInspector, thread_id: str, checkpoint_id: str | None
) -> Final:
    config: Any = {"configurable": {"thread_id": thread_id}}
    if checkpoint_id:
        config["configurable"]["checkpoint_id"] = checkpoint_id
    snapshot = await inspector.graph.aget_state(config)
    if snapshot.created_at is None:
        return Final(values={})
    messages = await transcript(inspector.archive, thread_id, snapshot.values or {})
    return Final(values={"messages": messages}, interrupts=interrupts_of(snapshot.interrupts))


def outcome_values(final: Final) -> dict[str, Any]:
    """The values, with `__interrupt__` while a confirmation waits."""
    if final.interrupts:
        return {**final.values, "__interrupt__": final.interrupts}
    return final.values
