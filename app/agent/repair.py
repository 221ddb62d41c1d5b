"""Close tool calls that never got a result (a crash, a cancelled run, a new message
arriving while a confirmation was pending), so the next model call is well-formed."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage

from app.agent.ports import WriteLedger
from app.db.idempotency import idempotency_key
from app.tools.results import ObservationFormat, error_text, failure, message

INTERRUPTED = error_text(
    "this call was interrupted and NOT executed. If it is still needed, explain and ask again."
)


def dangling_calls(messages: Sequence[AnyMessage]) -> list[tuple[str, str, dict[str, object]]]:
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    out: list[tuple[str, str, dict[str, object]]] = []
    for m in messages:
        if isinstance(m, AIMessage):
            for call in m.tool_calls:
                if call["id"] and call["id"] not in answered:
                    out.append((call["id"], call["name"], dict(call["args"])))
    return out


async def close_dangling(
    messages: Sequence[AnyMessage],
    *,
    thread_id: str,
    turn_id: str | None,
    write_names: frozenset[str],
    ledger: WriteLedger,
    customer_id: str | None = None,
    observation_format: ObservationFormat = "text",
) -> list[ToolMessage]:
    """A write that committed gets its recorded result, as its tool renders it; anything
    else is marked as interrupted and not executed."""
    closed: list[ToolMessage] = []
    for call_id, name, args in dangling_calls(messages):
        recorded = None
        if name in write_names and turn_id:
            recorded = await ledger.recorded_result(
                idempotency_key(thread_id, turn_id, name, args),
                name=name,
                args=args,
                customer_id=customer_id,
                observation_format=observation_format,
            )
        content, artifact = recorded or (INTERRUPTED, failure("interrupted"))
        closed.append(message(content, artifact, tool_call_id=call_id, name=name))
    return closed
