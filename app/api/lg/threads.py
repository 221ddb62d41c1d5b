"""Threads: create, read, search, delete; state and history in the `ThreadState` shape."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Response
from langgraph.types import Interrupt, StateSnapshot

from app.api.deps import Services, ServicesDep, ThreadRef
from app.api.lg.deps import ExistingThread, LgThread, LgUser, limit_thread_creation
from app.api.lg.errors import refuse
from app.api.lg.metadata import contains, search_filter, stored_part
from app.api.lg.queries import SortBy, count_threads, search_threads, thread_row
from app.api.lg.schemas import (
    HistoryQuery,
    StateAtCheckpoint,
    ThreadCount,
    ThreadCreate,
    ThreadSearch,
    ThreadUpdate,
)
from app.api.lg.views import (
    lc_message,
    thread_state,
    thread_status,
    thread_view,
    transcript,
)
from app.api.routes.common import require_json
from app.api.schemas import Line
from app.db.erase import forget_thread
from app.errors import AppError, Conflict, NotFound, thread_not_found
from app.identity import Principal
from app.threads.ids import SESSION_ID_RE
from app.threads.ids import thread_id as checkpointer_thread_id

router = APIRouter(tags=["langgraph: threads"])


def _config(thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


async def snapshot_of(
    services: Services, thread_id: str, checkpoint_id: str | None = None
) -> StateSnapshot:
    snapshot = await services.inspector.graph.aget_state(_config(thread_id, checkpoint_id))  # type: ignore[arg-type]
    if checkpoint_id and snapshot.created_at is None:
        raise NotFound("checkpoint not found", code="checkpoint_not_found")
    return snapshot


async def values_of(services: Services, thread_id: str, snapshot: StateSnapshot) -> dict[str, Any]:
    if snapshot.created_at is None:
        return {}
    messages = await transcript(services.inspector.archive, thread_id, snapshot.values or {})
    return {"messages": messages}


async def state_view(
    services: Services, thread: ThreadRef, checkpoint_id: str | None = None
) -> dict[str, Any]:
    snapshot = await snapshot_of(services, thread.id, checkpoint_id)
    values = await values_of(services, thread.id, snapshot)
    return thread_state(thread.session_id, snapshot, values.get("messages", []))


def _task_interrupts(snapshot: StateSnapshot) -> list[tuple[str, Interrupt]]:
    return [(task.id, item) for task in snapshot.tasks for item in task.interrupts]


async def thread_object(services: Services, user: Principal, row: dict[str, Any]) -> dict[str, Any]:
    snapshot = await snapshot_of(services, row["thread_id"])
    values = await values_of(services, row["thread_id"], snapshot)
    status = thread_status(bool(row.get("busy")), row.get("last_run"), snapshot.interrupts)
    return thread_view(row, status, values or None, _task_interrupts(snapshot))


@router.post("/threads", dependencies=[Depends(require_json), Depends(limit_thread_creation)])
async def create_thread(body: ThreadCreate, user: LgUser, services: ServicesDep) -> dict[str, Any]:
    """A new session; its id is a UUID unless the client names one."""
    if body.supersteps:
        refuse(
            "threads cannot be created with supersteps: state is written only by runs",
            "supersteps_unsupported",
        )
    if body.ttl is not None:
        refuse(
            "thread TTLs are not supported; delete a thread with DELETE /threads/{id}",
            "ttl_unsupported",
        )
    metadata = stored_part(body.metadata)
    session_id = body.thread_id or str(uuid.uuid4())
    if not SESSION_ID_RE.fullmatch(session_id):
        refuse("thread_id must be 1-64 characters of A-Z a-z 0-9 _ -", "validation_error")
    thread_id = checkpointer_thread_id(user.user_id, session_id)
    if body.thread_id is not None and await services.repo.thread(thread_id) is not None:
        if body.if_exists != "do_nothing":
            raise Conflict("a thread with this id already exists", code="thread_exists")
    else:
        await services.repo.create_thread_with_metadata(
            thread_id, user.user_id, session_id, metadata
        )
    row = await thread_row(services.pool, user.user_id, thread_id)
    assert row is not None
    return await thread_object(services, user, row)


@router.patch("/threads/{thread_id}", dependencies=[Depends(require_json)])
async def update_thread(
    body: ThreadUpdate, thread: LgThread, user: LgUser, services: ServicesDep
) -> dict[str, Any]:
    """Merge metadata into the thread's: the keys given replace theirs, the rest stay."""
    if body.ttl is not None:
        refuse(
            "thread TTLs are not supported; delete a thread with DELETE /threads/{id}",
            "ttl_unsupported",
        )
    metadata = stored_part(body.metadata)
    if not await services.repo.merge_thread_metadata(thread.id, metadata):
        raise thread_not_found()
    row = await thread_row(services.pool, user.user_id, thread.id)
    if row is None:
        raise thread_not_found()
    return await thread_object(services, user, row)


@router.get("/threads/{thread_id}")
async def get_thread(thread: LgThread, user: LgUser, services: ServicesDep) -> dict[str, Any]:
    row = await thread_row(services.pool, user.user_id, thread.id)
    if row is None:
        raise thread_not_found()
    return await thread_object(services, user, row)


@router.delete("/threads/{thread_id}", status_code=204)
async def delete_thread(thread: LgThread, services: ServicesDep) -> Response:
    await forget_thread(services.pool, thread.id, services.inspector.delete)
    return Response(status_code=204)


# A `values` filter is applied to each thread's state (the transcript lives in its
# checkpoints, not in a column): over this many of the caller's threads at most.
VALUES_SCAN = 1000


@router.post("/threads/search", dependencies=[Depends(require_json)])
async def search(body: ThreadSearch, user: LgUser, services: ServicesDep) -> list[dict[str, Any]]:
    """The caller's threads, newest activity first unless sorted otherwise; filtered by
    metadata and status in SQL, by values on each thread's state."""
    if body.extract:
        refuse("extract is not supported", "extract_unsupported")
    metadata = search_filter(body.metadata)
    if metadata is None:
        return []  # another graph or assistant: no thread here
    ids = [i for i in body.ids if SESSION_ID_RE.fullmatch(i)] if body.ids is not None else None
    sort_by: SortBy = body.sort_by or "updated_at"
    window = (0, VALUES_SCAN) if body.values else (body.offset, body.limit)
    rows = await search_threads(
        services.pool,
        user.user_id,
        session_ids=ids,
        metadata=metadata,
        status=body.status,
        sort_by=sort_by,
        descending=body.sort_order != "asc",
        limit=window[1],
        offset=window[0],
    )
    threads = [await thread_object(services, user, row) for row in rows]
    if body.values:
        threads = [t for t in threads if contains(t["values"] or {}, body.values)]
        threads = threads[body.offset : body.offset + body.limit]
    if body.select:
        keep = set(body.select)
        threads = [{k: v for k, v in t.items() if k in keep} for t in threads]
    return threads


@router.post("/threads/count", dependencies=[Depends(require_json)])
async def count(body: ThreadCount, user: LgUser, services: ServicesDep) -> int:
    """How many of the caller's threads a search with these filters finds."""
    metadata = search_filter(body.metadata)
    if metadata is None:
        return 0
    if not body.values:
        return await count_threads(
            services.pool, user.user_id, metadata=metadata, status=body.status
        )
    rows = await search_threads(
        services.pool,
        user.user_id,
        session_ids=None,
        metadata=metadata,
        status=body.status,
        sort_by="updated_at",
        descending=True,
        limit=VALUES_SCAN,
        offset=0,
    )
    found = [await thread_object(services, user, row) for row in rows]
    return sum(contains(t["values"] or {}, body.values) for t in found)


@router.get("/threads/{thread_id}/state")
async def get_state(thread: ExistingThread, services: ServicesDep) -> dict[str, Any]:
    return await state_view(services, thread)


@router.get("/threads/{thread_id}/state/{checkpoint_id}")
async def get_state_at(
    thread: ExistingThread,
    services: ServicesDep,
    checkpoint_id: Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9-]+$")],
) -> dict[str, Any]:
    return await state_view(services, thread, checkpoint_id)


@router.post("/threads/{thread_id}/state/checkpoint", dependencies=[Depends(require_json)])
async def post_state_at(
    body: StateAtCheckpoint, thread: ExistingThread, services: ServicesDep
) -> dict[str, Any]:
    if body.checkpoint.checkpoint_ns:
        raise NotFound("checkpoint not found", code="checkpoint_not_found")
    return await state_view(services, thread, body.checkpoint.checkpoint_id)


# Not in the document: state is written only by runs, so this method is not one the
# resource has (405, with the reason, for the SDKs' update_state).
@router.post("/threads/{thread_id}/state", include_in_schema=False)
async def update_state(thread: ExistingThread) -> None:
    refused = AppError(
        "the state is written only by runs: send a message, resume a confirmation, or "
        "fork from a checkpoint with a run's `checkpoint`",
        code="state_update_unsupported",
        status_code=405,
    )
    refused.headers = {"Allow": "GET"}
    raise refused


async def _history(
    services: Services, thread: ThreadRef, limit: int, before: str | None
) -> list[dict[str, Any]]:
    graph = services.inspector.graph
    snapshots = [
        snap
        async for snap in graph.aget_state_history(
            _config(thread.id),  # type: ignore[arg-type]
            limit=limit,
            before=_config(thread.id, before) if before else None,  # type: ignore[arg-type]
        )
    ]
    # One read of the archive for the page: each checkpoint shows its own prefix of it.
    archived = max((int((s.values or {}).get("archived_count") or 0) for s in snapshots), default=0)
    archive = await services.inspector.archive.read(thread.id, archived) if archived else []
    states = []
    for snap in snapshots:
        values = dict(snap.values or {})
        upto = int(values.get("archived_count") or 0)
        values["archived_count"] = 0
        messages = await transcript(services.inspector.archive, thread.id, values)
        messages = [lc_message(v) for v in archive[:upto]] + messages
        states.append(thread_state(thread.session_id, snap, messages))
    return states


@router.post("/threads/{thread_id}/history", dependencies=[Depends(require_json)])
async def post_history(
    body: HistoryQuery, thread: ExistingThread, services: ServicesDep
) -> list[dict[str, Any]]:
    if body.metadata:
        refuse("history cannot be filtered by metadata", "metadata_filter_unsupported")
    before = (
        body.before
        if isinstance(body.before, str)
        else (body.before.checkpoint_id if body.before else None)
    )
    return await _history(services, thread, body.limit, before)


@router.get("/threads/{thread_id}/history")
async def get_history(
    thread: ExistingThread,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 10,
    before: Annotated[Line | None, Query(max_length=64)] = None,
) -> list[dict[str, Any]]:
    return await _history(services, thread, limit, before)
