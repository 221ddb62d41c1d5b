"""cs-agent's threads as the LangGraph Platform shows them: LangChain message dicts,
`ThreadState`, `Thread`, `Run`, `Assistant` and the interrupt of a pending confirmation.

Only the transcript is state here: `values` is `{"messages": [...]}`, the whole of it
(archived messages included, so a summary never shrinks what a UI shows). The verified
customer, breakers, cache and the rest of the agent's bookkeeping are never shown.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import Interrupt, StateSnapshot

from app.agent.views import message_view
from app.threads.archive import PgTranscriptArchive

GRAPH_ID = "agent"
# Stable across processes and releases: clients store it.
ASSISTANT_ID = str(uuid.uuid5(uuid.NAMESPACE_URL, "cs-agent/assistants/agent"))
ASSISTANT_CREATED_AT = "2026-01-01T00:00:00+00:00"
THREAD_METADATA = {"graph_id": GRAPH_ID, "assistant_id": ASSISTANT_ID}
_TYPES = {"user": "human", "assistant": "ai", "tool": "tool", "system": "system"}
# What a checkpoint's metadata may show (the rest names the server's own thread id).
_METADATA_KEYS = ("source", "step", "parents")


def is_our_assistant(assistant_id: str) -> bool:
    return assistant_id in (ASSISTANT_ID, GRAPH_ID)


def assistant() -> dict[str, Any]:
    return {
        "assistant_id": ASSISTANT_ID,
        "graph_id": GRAPH_ID,
        "config": {},
        "context": {},
        "metadata": {"created_by": "system"},
        "name": GRAPH_ID,
        "description": "cs-agent: the shop's customer-service agent",
        "version": 1,
        "created_at": ASSISTANT_CREATED_AT,
        "updated_at": ASSISTANT_CREATED_AT,
    }


def lc_message(view: dict[str, Any]) -> dict[str, Any]:
    """A message view (`app/agent/views.py`, also what the archive keeps) as the dict a
    LangChain message dumps to."""
    kind = _TYPES.get(str(view.get("role")), str(view.get("role")))
    out: dict[str, Any] = {
        "type": kind,
        "id": view.get("id"),
        "content": view.get("content") or "",
        "name": view.get("name") if kind == "tool" or view.get("author") == "staff" else None,
        # who wrote it (customer, agent, staff), as LangChain keeps it on a message
        "additional_kwargs": {"author": view["author"]} if view.get("author") else {},
        "response_metadata": {},
    }
    if kind == "ai":
        out["tool_calls"] = [
            {"name": c["name"], "args": c.get("args") or {}, "id": c.get("id"), "type": "tool_call"}
            for c in view.get("tool_calls") or []
        ]
        out["invalid_tool_calls"] = []
        out["usage_metadata"] = None
    if kind == "tool":
        out["tool_call_id"] = view.get("tool_call_id") or ""
        out["status"] = "error" if view.get("status") == "error" else "success"
        out["artifact"] = None
    return out


async def transcript(
    archive: PgTranscriptArchive, thread_id: str, values: dict[str, Any]
) -> list[dict[str, Any]]:
    """The conversation as a person saw it: archived messages, the working ones, and a
    message stored for a turn that has not opened yet (so it shows from the step it
    arrived in, as a Platform graph's input does)."""
    views = [message_view(m) for m in values.get("messages") or []]
    archived = int(values.get("archived_count") or 0)
    if archived:
        views = [*await archive.read(thread_id, archived), *views]
    incoming = values.get("incoming")
    if incoming is not None and incoming.id not in {v["id"] for v in views}:
        views.append(message_view(incoming))
    return [lc_message(v) for v in views]


def hitl_value(value: Any) -> Any:
    """A pending confirmation as Agent Chat UI renders it (LangChain's human-in-the-loop
    request: `action_requests` + `review_configs`), with cs-agent's own `pending` beside
    it. Only approve and reject are offered: confirmation is all or nothing per turn."""
    if not isinstance(value, dict) or "pending" not in value:
        return value
    pending = list(value["pending"])
    return {
        "pending": pending,
        "action_requests": [
            {"name": p.get("name"), "args": p.get("args") or {}, "description": p.get("summary")}
            for p in pending
        ],
        "review_configs": [
            {"action_name": p.get("name"), "allowed_decisions": ["approve", "reject"]}
            for p in pending
        ],
    }


def interrupt_view(item: Interrupt) -> dict[str, Any]:
    return {"value": hitl_value(item.value), "id": item.id}


def checkpoint_ref(session_id: str, config: RunnableConfig | None) -> dict[str, Any] | None:
    checkpoint_id = (config or {}).get("configurable", {}).get("checkpoint_id")
    if not checkpoint_id:
        return None
    return {"thread_id": session_id, "checkpoint_ns": "", "checkpoint_id": str(checkpoint_id)}


def _metadata(session_id: str, snapshot: StateSnapshot) -> dict[str, Any]:
    metadata = dict(snapshot.metadata or {})
    kept = {k: metadata[k] for k in _METADATA_KEYS if k in metadata}
    return {**kept, **THREAD_METADATA, "thread_id": session_id}


def thread_state(
    session_id: str, snapshot: StateSnapshot, messages: list[dict[str, Any]]
) -> dict[str, Any]:
    """The Platform's `ThreadState`. A pending confirmation is in `tasks[].interrupts`
    and `interrupts`."""
    checkpoint = checkpoint_ref(session_id, snapshot.config)
    parent = checkpoint_ref(session_id, snapshot.parent_config)
    tasks = [
        {
            "id": task.id,
            "name": task.name,
            "path": list(task.path),
            "error": None if task.error is None else type(task.error).__name__,
            "interrupts": [interrupt_view(i) for i in task.interrupts],
            "checkpoint": None,
            "state": None,
            "result": None,
        }
        for task in snapshot.tasks
    ]
    return {
        "values": {"messages": messages} if snapshot.created_at is not None else {},
        "next": list(snapshot.next),
        "tasks": tasks,
        "metadata": _metadata(session_id, snapshot),
        "created_at": snapshot.created_at,
        "checkpoint": checkpoint
        or {"thread_id": session_id, "checkpoint_ns": "", "checkpoint_id": None},
        "parent_checkpoint": parent,
        "checkpoint_id": checkpoint["checkpoint_id"] if checkpoint else None,
        "parent_checkpoint_id": parent["checkpoint_id"] if parent else None,
        "interrupts": [interrupt_view(i) for i in snapshot.interrupts],
    }


def thread_status(busy: bool, last_run: str | None, interrupts: Sequence[Interrupt]) -> str:
    """`busy` while a run holds the thread, `interrupted` while a confirmation waits,
    `error` after a failed run, `idle` otherwise."""
    if busy:
        return "busy"
    if interrupts:
        return "interrupted"
    if last_run in ("failed", "abandoned"):
        return "error"
    return "idle"


def thread_view(
    row: dict[str, Any],
    status: str,
    values: dict[str, Any] | None,
    interrupts: Iterable[tuple[str, Interrupt]] = (),
) -> dict[str, Any]:
    by_task: dict[str, list[dict[str, Any]]] = {}
    for task_id, item in interrupts:
        by_task.setdefault(task_id, []).append(interrupt_view(item))
    return {
        "thread_id": row["session_id"],
        "created_at": _iso(row["created_at"]),
        "updated_at": _iso(row["updated_at"]),
        "metadata": {**(row.get("metadata") or {}), **THREAD_METADATA},
        "status": status,
        "state_updated_at": _iso(row["updated_at"]),
        "config": {},
        "values": values,
        "interrupts": by_task,
    }


RUN_STATUS = {
    "running": "running",
    "completed": "success",
    "interrupted": "success",  # paused for a confirmation: the thread is `interrupted`
    "failed": "error",
    "abandoned": "error",
    "cancelled": "interrupted",
}


def run_view(row: dict[str, Any], session_id: str) -> dict[str, Any]:
    created: datetime = row["created_at"]
    finished: datetime | None = row.get("finished_at")
    return {
        "run_id": row["run_id"],
        "thread_id": session_id,
        "assistant_id": ASSISTANT_ID,
        "created_at": _iso(created),
        "updated_at": _iso(finished or created),
        "status": RUN_STATUS.get(row["status"], "error"),
        # the client's (runs.metadata, migration 0020), with the assistant's keys
        "metadata": {"created_by": "system", **(row.get("metadata") or {}), **THREAD_METADATA},
        "multitask_strategy": "reject",
        "kwargs": {},
    }


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value
