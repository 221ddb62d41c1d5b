"""Runs on a thread: stream, create (background), join, join the stream, wait, get, list,
cancel. A LangGraph run is one of cs-agent's runs (RunService), and keeps its guarantees:
one writer per thread, a run that outlives its client, confirmed writes done once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from sse_starlette.sse import EventSourceResponse

from app.api.deps import Services, ServicesDep, ThreadRef
from app.api.lg.deps import ExistingThread, LgThread, LgUser
from app.api.lg.errors import refuse
from app.api.lg.final import final_state, outcome_values
from app.api.lg.inputs import check_supported, decision_of, message_of, stream_modes
from app.api.lg.metadata import stored_part
from app.api.lg.run_records import annotate_run, run_options, run_record, run_records
from app.api.lg.schemas import RunCreate
from app.api.lg.translate import (
    Final,
    PlatformEvent,
    Translator,
    event_id,
    merged,
    parse_event_id,
    wanted,
)
from app.api.lg.views import is_our_assistant, lc_message, run_view, transcript
from app.api.lg.webhooks import checked_webhook
from app.api.routes.common import require_json
from app.api.sse import NO_BUFFERING
from app.errors import NotFound, thread_not_found
from app.identity import Principal
from app.jsonbytes import json_bytes
from app.runs.run import Run, human_message_id
from app.runs.stream import Done, RunFailed, RunStarted, Sequenced, sse_frame

router = APIRouter(tags=["langgraph: runs"])
RunIdPath = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9-]+$")]
KEEPALIVE_S = 5.0
LATEST = 1 << 62


DEFAULT_MODES = frozenset({"values", "messages-tuple", "updates", "custom"})
# The modes a join may ask for, as the document states them (translate.MODES; "" as the
# SDKs send it for none): any other is refused by the query's validation.
JoinMode = Literal["", "custom", "messages", "messages-tuple", "tools", "updates", "values"]


@dataclass(frozen=True)
class RunInfo:
    """What a Platform client asked of a run, kept with the run (`runs.lg_options`) for
    joins on any worker or replica: the stream modes, whether its events carry ids, the
    message that opened it."""

    modes: frozenset[str]
    resumable: bool
    human: dict[str, Any] | None

    def stored(self) -> dict[str, Any]:
        return {"modes": sorted(self.modes), "resumable": self.resumable, "human": self.human}

    @classmethod
    def of(cls, stored: dict[str, Any] | None) -> RunInfo:
        """From `stored()`; a run the native API started joins with the defaults."""
        if stored is None:
            return cls(modes=DEFAULT_MODES, resumable=True, human=None)
        human = stored.get("human")
        return cls(
            modes=frozenset(str(m) for m in stored.get("modes") or DEFAULT_MODES),
            resumable=bool(stored.get("resumable")),
            human=human if isinstance(human, dict) else None,
        )


def _locations(session_id: str, run_id: str, tail: str) -> dict[str, str]:
    """Relative to the API root (`.../lg`), as the SDKs resolve them against their base URL."""
    run = f"/threads/{session_id}/runs/{run_id}"
    return {"Location": f"{run}/{tail}", "Content-Location": run}


# -- starting a run -------------------------------------------------------------------------


async def _start(
    request: Request, body: RunCreate, thread: ThreadRef, user: Principal, services: Services
) -> tuple[Run | dict[str, Any], RunInfo]:
    if not is_our_assistant(body.assistant_id):
        raise NotFound("assistant not found", code="assistant_not_found")
    check_supported(body)
    with services.runs.admission.admit():  # before any connection (app/runs/admission.py)
        return await _open(request, body, thread, user, services)


async def _open(
    request: Request, body: RunCreate, thread: ThreadRef, user: Principal, services: Services
) -> tuple[Run | dict[str, Any], RunInfo]:
    modes = stream_modes(body.stream_mode)
    metadata = stored_part(body.metadata)
    webhook = await checked_webhook(body.webhook, services.settings) if body.webhook else None
    if await services.repo.thread(thread.id) is None:
        if body.if_not_exists != "create":
            raise thread_not_found()
        # as the official server does: the new thread takes the run's metadata
        await services.repo.create_thread_with_metadata(
            thread.id, user.user_id, thread.session_id, metadata
        )
    command = body.command
    human: dict[str, Any] | None = None
    outcome: Run | dict[str, Any]
    if command is not None and (command.resume is not None or command.goto):
        decision = decision_of(command.resume, command.goto)
        outcome = await services.runs.resume(user, thread.id, thread.session_id, decision)
    else:
        message = message_of(body.input)
        checkpoint_id = (
            body.checkpoint.checkpoint_id if body.checkpoint else None
        ) or body.checkpoint_id
        if checkpoint_id is not None:
            message = await _fork(services, thread, user, checkpoint_id, message)
        if message is None:
            refuse("a run needs a human message, a command, or a checkpoint", "input_required")
        content, client_id = message
        client_id = client_id or str(uuid.uuid4())
        outcome = await services.runs.post_message(
            user, thread.id, thread.session_id, content, client_id, refuse_held=True
        )
        human = lc_message(
            {"id": human_message_id(thread.id, client_id), "role": "user", "content": content}
        )
    info = RunInfo(modes=modes, resumable=body.stream_resumable, human=human)
    run_id = outcome.run_id if isinstance(outcome, Run) else str(outcome.get("run_id"))
    if isinstance(outcome, Run):  # (a replayed run keeps its own)
        await annotate_run(
            services.pool, run_id, webhook=webhook, metadata=metadata, options=info.stored()
        )
    return outcome, info


async def _fork(
    services: Services,
    thread: ThreadRef,
    user: Principal,
    checkpoint_id: str,
    message: tuple[str, str | None] | None,
) -> tuple[str, str | None]:
    """Edit (a message from a checkpoint) or regenerate (no message: the last human
    message of that checkpoint, asked again from before it), through the rewind."""
    inspector = services.inspector
    config: Any = {"configurable": {"thread_id": thread.id, "checkpoint_id": checkpoint_id}}
    target = await inspector.graph.aget_state(config)
    if target.created_at is None:
        raise NotFound("checkpoint not found", code="checkpoint_not_found")
    message_id: str | None = None
    if message is None:
        values = target.values or {}
        humans = [
            m
            for m in await transcript(inspector.archive, thread.id, values)
            if m["type"] == "human"
        ]
        if not humans:
            refuse("there is no human message to regenerate at that checkpoint", "input_required")
        message = (str(humans[-1]["content"]), None)
        message_id = str(humans[-1]["id"])
    head = await inspector.graph.aget_state({"configurable": {"thread_id": thread.id}})
    head_id = (head.config or {}).get("configurable", {}).get("checkpoint_id")
    if message_id is not None or head_id != checkpoint_id:
        await inspector.rewind(
            thread.id,
            thread.session_id,
            user.role,
            user.user_id,
            checkpoint_id=None if message_id else checkpoint_id,
            message_id=message_id,
        )
    return message


# -- following a run ------------------------------------------------------------------------


async def _final(services: Services, thread_id: str, checkpoint_id: str | None) -> Final:
    return await final_state(services.inspector, thread_id, checkpoint_id)


def _source(
    services: Services, thread: ThreadRef, run_id: str
) -> tuple[AsyncIterator[list[Sequenced]], int | None]:
    """The run's whole log as it comes, and how far it has got now (None: not known here)."""
    run = services.runs.live(run_id)
    if run is not None and run.thread_id == thread.id:
        return run.follow(0, services.settings.sse_frame_ms / 1000), len(run.log)
    return services.logs.follow(thread.id, run_id, 0), None


def _frame(event: PlatformEvent, with_id: bool) -> bytes:
    seq, k, name, data = event
    body = json_bytes(data) or b"null"
    return sse_frame(name, body, event_id(seq, k) if with_id else None, id_last=True)


async def _platform_frames(
    services: Services,
    thread: ThreadRef,
    run_id: str,
    info: RunInfo,
    after: tuple[int, int] | None,
    *,
    with_ids: bool,
    cancel_on_disconnect: bool,
) -> AsyncIterator[bytes]:
    source, now = _source(services, thread, run_id)
    if after is None:  # a join without Last-Event-ID: only what comes from now on
        after = (now, LATEST) if now is not None else None
    translator = Translator(run_id, thread.session_id, [], info.human, services.runs.write_names)
    skip_first_batch = after is None  # joined on another replica: its past is what is there
    finished = False
    try:
        async for batch in source:
            events: list[PlatformEvent] = []
            for seq, event in batch:
                final = None
                if isinstance(event, RunStarted):
                    start = (
                        await _final(services, thread.id, event.checkpoint_id)
                        if event.checkpoint_id
                        else None
                    )
                    translator.base = start.values.get("messages", []) if start else []
                elif isinstance(event, Done):
                    finished = True
                    if event.status != "failed":
                        final = await _final(services, thread.id, event.checkpoint_id)
                for k, (name, data) in enumerate(translator.feed(event, final)):
                    if skip_first_batch or (after is not None and (seq, k) <= after):
                        continue
                    if wanted(name, info.modes):
                        events.append((seq, k, name, data))
            skip_first_batch = False
            if events:
                yield b"".join(_frame(e, with_ids) for e in merged(events))
    finally:
        if not finished and cancel_on_disconnect:
            asyncio.get_running_loop().create_task(_cancel_quietly(services, thread, run_id))


async def _cancel_quietly(services: Services, thread: ThreadRef, run_id: str) -> None:
    try:
        await services.runs.cancel(thread.id, run_id)
    except Exception:  # it ended meanwhile
        return


def _sse(
    frames: AsyncIterator[bytes], services: Services, headers: dict[str, str]
) -> EventSourceResponse:
    return EventSourceResponse(
        frames,
        ping=max(1, int(services.settings.sse_heartbeat_s)),
        headers={**NO_BUFFERING, **headers},
    )


async def _outcome(services: Services, thread: ThreadRef, run_id: str) -> dict[str, Any]:
    """What /wait and /join answer: the state's values the run ended on (with
    `__interrupt__` while a confirmation waits), or `__error__`."""
    source, _ = _source(services, thread, run_id)
    done: Done | None = None
    failed: RunFailed | None = None
    async for batch in source:
        for _, event in batch:
            if isinstance(event, RunFailed):
                failed = event
            elif isinstance(event, Done):
                done = event
    if failed is not None:
        return {"__error__": {"error": failed.code, "message": failed.message}}
    return outcome_values(await _final(services, thread.id, done.checkpoint_id if done else None))


def _json_when_done(
    work: Callable[[], Any], on_disconnect: Callable[[], None] | None, headers: dict[str, str]
) -> StreamingResponse:
    """The answer as JSON once it is ready; a newline every few seconds until then keeps
    proxies from closing the connection (JSON parsers skip leading whitespace)."""

    async def body() -> AsyncIterator[bytes]:
        task = asyncio.ensure_future(work())
        finished = False
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=KEEPALIVE_S)
                if done:
                    finished = True
                    yield json_bytes(task.result()) or b"{}"
                    return
                yield b"\n"
        finally:
            if not finished:
                task.cancel()
                if on_disconnect is not None:
                    on_disconnect()

    return StreamingResponse(body(), media_type="application/json", headers=headers)


# -- routes ---------------------------------------------------------------------------------

_POST = [Depends(require_json)]


@router.post("/threads/{thread_id}/runs/stream", dependencies=_POST)
async def stream_run(
    request: Request, body: RunCreate, thread: LgThread, user: LgUser, services: ServicesDep
) -> Response:
    outcome, info = await _start(request, body, thread, user, services)
    run_id = outcome.run_id if isinstance(outcome, Run) else str(outcome.get("run_id"))
    frames = _platform_frames(
        services,
        thread,
        run_id,
        info,
        (0, -1),
        with_ids=body.stream_resumable,
        cancel_on_disconnect=body.on_disconnect == "cancel",
    )
    return _sse(frames, services, _locations(thread.session_id, run_id, "stream"))


@router.post("/threads/{thread_id}/runs", dependencies=_POST)
async def create_run(
    request: Request, body: RunCreate, thread: LgThread, user: LgUser, services: ServicesDep
) -> JSONResponse:
    outcome, _ = await _start(request, body, thread, user, services)
    run_id = outcome.run_id if isinstance(outcome, Run) else str(outcome.get("run_id"))
    row = await run_record(services.pool, thread.id, run_id)
    assert row is not None
    headers = _locations(thread.session_id, run_id, "join")
    del headers["Location"]
    return JSONResponse(run_view(row, thread.session_id), headers=headers)


@router.post("/threads/{thread_id}/runs/wait", dependencies=_POST)
async def wait_run(
    request: Request, body: RunCreate, thread: LgThread, user: LgUser, services: ServicesDep
) -> StreamingResponse:
    outcome, _ = await _start(request, body, thread, user, services)
    run_id = outcome.run_id if isinstance(outcome, Run) else str(outcome.get("run_id"))
    cancel = None
    if body.on_disconnect == "cancel":

        def cancel() -> None:
            asyncio.get_running_loop().create_task(_cancel_quietly(services, thread, run_id))

    return _json_when_done(
        lambda: _outcome(services, thread, run_id),
        cancel,
        _locations(thread.session_id, run_id, "join"),
    )


@router.get("/threads/{thread_id}/runs")
async def list_runs(
    thread: ExistingThread,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
    offset: Annotated[int, Query(ge=0, le=1000)] = 0,
) -> list[dict[str, Any]]:
    rows = await run_records(services.pool, thread.id, limit, offset)
    return [run_view(r, thread.session_id) for r in rows]


@router.get("/threads/{thread_id}/runs/{run_id}")
async def get_run(thread: LgThread, run_id: RunIdPath, services: ServicesDep) -> dict[str, Any]:
    row = await run_record(services.pool, thread.id, run_id)
    if row is None:
        raise NotFound("run not found", code="run_not_found")
    return run_view(row, thread.session_id)


async def _require_run(services: Services, thread: ThreadRef, run_id: str) -> None:
    if await services.repo.run(thread.id, run_id) is None:
        raise NotFound("run not found", code="run_not_found")


@router.get("/threads/{thread_id}/runs/{run_id}/join")
async def join_run(
    thread: LgThread,
    run_id: RunIdPath,
    services: ServicesDep,
    cancel_on_disconnect: bool = False,
) -> StreamingResponse:
    await _require_run(services, thread, run_id)
    cancel = None
    if cancel_on_disconnect:

        def cancel() -> None:
            asyncio.get_running_loop().create_task(_cancel_quietly(services, thread, run_id))

    return _json_when_done(
        lambda: _outcome(services, thread, run_id),
        cancel,
        _locations(thread.session_id, run_id, "join"),
    )


@router.get("/threads/{thread_id}/runs/{run_id}/stream")
async def join_stream(
    request: Request,
    thread: LgThread,
    run_id: RunIdPath,
    services: ServicesDep,
    stream_mode: Annotated[list[JoinMode] | None, Query()] = None,
    cancel_on_disconnect: bool = False,
    last_event_id: Annotated[str | None, Header(max_length=40)] = None,
) -> Response:
    """The run's events after `Last-Event-ID` ("-1": all of them); without one, only those
    still to come. On any replica."""
    await _require_run(services, thread, run_id)
    known = RunInfo.of(await run_options(services.pool, run_id))
    modes = stream_modes(list(stream_mode)) if stream_mode else None
    info = RunInfo(modes=modes or known.modes, resumable=known.resumable, human=known.human)
    after = parse_event_id(last_event_id)
    frames = _platform_frames(
        services,
        thread,
        run_id,
        info,
        after,
        with_ids=info.resumable or after is not None,
        cancel_on_disconnect=cancel_on_disconnect,
    )
    return _sse(frames, services, _locations(thread.session_id, run_id, "stream"))


@router.post("/threads/{thread_id}/runs/{run_id}/cancel")
async def cancel_run(
    thread: LgThread,
    run_id: RunIdPath,
    services: ServicesDep,
    wait: bool = False,
    action: Annotated[
        str, Query(json_schema_extra={"not": {"const": "rollback"}}, max_length=64)
    ] = "interrupt",
) -> Response:
    if action == "rollback":
        refuse(
            "a run's steps stay in history; cancel with action=interrupt", "rollback_unsupported"
        )
    await services.runs.cancel(thread.id, run_id)
    if not wait:
        return Response(status_code=202)
    return _json_when_done(
        lambda: _outcome(services, thread, run_id),
        None,
        _locations(thread.session_id, run_id, "join"),
    )


async def _stateless() -> None:
    refuse(
        "stateless runs are not supported: every conversation is a thread; "
        "create one with POST /threads",
        "stateless_runs_unsupported",
    )


for _path in ("/runs", "/runs/stream", "/runs/wait", "/runs/batch", "/runs/cancel"):
    router.add_api_route(_path, _stateless, methods=["POST"], include_in_schema=False)
