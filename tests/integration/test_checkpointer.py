"""PostgresCheckpointer against upstream AsyncPostgresSaver, on the real database.

`app/db/checkpointer.py` re-writes three upstream methods (`aput`, `aput_writes`,
`_load_checkpoint_tuple`) so that (de)serialisation runs on the event loop instead of in
`asyncio.to_thread`. Its claim is that nothing stored or loaded changes: the same rows,
the same loaded tuples. These tests run one graph through both savers and compare the
tables and the loads, so a langgraph upgrade that changes upstream's versions of those
methods (or an edit to ours) fails here rather than corrupting stored threads.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import aio as upstream_aio
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Interrupt, interrupt
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from app.db.checkpointer import PostgresCheckpointer, store_held
from app.lifespan import build_services


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    facts: dict[str, Any]  # a blob
    turns: int  # inline
    stage: str  # inline
    note: str | None  # inline, None at first


def greet(state: State) -> State:
    return {
        "messages": [AIMessage("hello", id="ai-1")],
        "facts": {"lang": "en"},
        "turns": 1,
        "stage": "greeted",
        "note": None,
    }


def record(state: State) -> State:
    return {"facts": {**state["facts"], "order": 42}, "turns": 2, "stage": "recorded"}


def audit(state: State) -> State:
    # Runs beside `approve`: its writes stay pending on the checkpoint the interrupt stops at.
    return {"note": "audited", "messages": [AIMessage("noted", id="ai-2")]}


def approve(state: State) -> State:
    # Two interrupts in one task: resuming the first re-runs the task on the same
    # checkpoint, so the second overwrites the first's special write (the upsert path).
    amount = interrupt({"question": "how much?"})
    return {"stage": interrupt({"question": f"refund {amount}?"})}


def build_graph(saver: AsyncPostgresSaver) -> Any:
    graph = StateGraph(State)
    for node in (greet, record, audit, approve):
        graph.add_node(node.__name__, node)
    graph.add_edge(START, "greet")
    graph.add_edge("greet", "record")
    graph.add_edge("record", "audit")
    graph.add_edge("record", "approve")
    graph.add_edge("audit", END)
    graph.add_edge("approve", END)
    return graph.compile(checkpointer=saver)


def thread_config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


async def run_to_interrupt(
    saver: AsyncPostgresSaver, thread_id: str, *, batched: bool = False
) -> list[str]:
    """Run the graph to `approve`'s second interrupt; return the interrupt ids. `batched`:
    each run inside `held_until_needed()`, as the service runs a turn."""
    graph, config = build_graph(saver), thread_config(thread_id)
    interrupts = []
    for graph_input in ({"messages": [HumanMessage("hi", id="human-1")]}, Command(resume="10 EUR")):
        if batched:
            assert isinstance(saver, PostgresCheckpointer)
            async with saver.held_until_needed():
                result = await graph.ainvoke(graph_input, config)
        else:
            result = await graph.ainvoke(graph_input, config)
        interrupts += result["__interrupt__"]
    return [i.id for i in interrupts]


async def fetch(pool: AsyncConnectionPool[Any], table: str, thread_id: str) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        cur = await conn.execute(f"SELECT * FROM {table} WHERE thread_id = %s", (thread_id,))
        rows: list[dict[str, Any]] = await cur.fetchall()
        return rows


async def run_specific_ids(
    pool: AsyncConnectionPool[Any], thread_id: str, interrupt_ids: list[str]
) -> dict[str, str]:
    """Everything that differs between two identical runs, mapped to a stable name.

    Checkpoints by position, task ids by (checkpoint position, task path). Channel
    versions carry a random suffix and are cut to their counter in `normalise`.
    """
    ids = {thread_id: "thread"}
    checkpoints = sorted(
        await fetch(pool, "checkpoints", thread_id), key=lambda r: r["checkpoint_id"]
    )
    position = {}
    for n, row in enumerate(checkpoints):
        position[row["checkpoint_id"]] = n
        ids[row["checkpoint_id"]] = f"checkpoint-{n}"
        ids[row["checkpoint"]["ts"]] = f"ts-{n}"
    for row in await fetch(pool, "checkpoint_writes", thread_id):
        ids[row["task_id"]] = f"task-{position[row['checkpoint_id']]}-{row['task_path']}"
    for n, interrupt_id in enumerate(interrupt_ids):
        ids[interrupt_id] = f"interrupt-{n}"
    return ids


VERSION = re.compile(r"(\d{32})\..*")


def normalise(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, str):
        version = VERSION.fullmatch(value)
        return ids.get(value, version.group(1) if version else value)
    if isinstance(value, bytes):
        for old, new in ids.items():
            value = value.replace(old.encode(), new.encode())
        return value
    if isinstance(value, dict):
        return {normalise(k, ids): normalise(v, ids) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalise(v, ids) for v in value]
    if isinstance(value, Interrupt):
        return Interrupt(normalise(value.value, ids), normalise(value.id, ids))
    return value


async def run_both(pool: AsyncConnectionPool[Any]) -> dict[str, tuple[str, dict[str, str]]]:
    """Run the same input through upstream and ours; thread id and id map for each."""
    threads = {}
    savers = (
        ("up", AsyncPostgresSaver(pool), False),
        ("ours", PostgresCheckpointer(pool), False),
        ("batched", PostgresCheckpointer(pool), True),
    )
    for name, saver, batched in savers:
        thread_id = f"{name}-{uuid.uuid4().hex}"
        interrupt_ids = await run_to_interrupt(saver, thread_id, batched=batched)
        threads[name] = (thread_id, await run_specific_ids(pool, thread_id, interrupt_ids))
    return threads


async def test_both_savers_write_the_same_rows(pool: AsyncConnectionPool[Any]) -> None:
    threads = await run_both(pool)
    tables: dict[str, dict[str, list[Any]]] = {}
    for name, (thread_id, ids) in threads.items():
        checkpoints = await fetch(pool, "checkpoints", thread_id)
        blobs = await fetch(pool, "checkpoint_blobs", thread_id)
        writes = await fetch(pool, "checkpoint_writes", thread_id)
        keys = ("checkpoint_id", "parent_checkpoint_id", "type", "checkpoint", "metadata")
        blob_keys = ("channel", "version", "type", "blob")
        write_keys = ("checkpoint_id", "task_id", "task_path", "idx", "channel", "type", "blob")
        tables[name] = {
            "checkpoints": sorted(normalise([r[k] for k in keys], ids) for r in checkpoints),
            "blobs": sorted(normalise([r[k] for k in blob_keys], ids) for r in blobs),
            "writes": sorted(normalise([r[k] for k in write_keys], ids) for r in writes),
        }
    up, ours = tables["up"], tables["ours"]

    # The run covers what the re-written methods branch on: blobs and inline values,
    # regular and special writes (the interrupt's upserted over by the second one), and
    # pending writes on the last checkpoint.
    last = f"checkpoint-{len(up['checkpoints']) - 1}"
    assert len(up["checkpoints"]) == 4
    assert {channel for channel, *_ in up["blobs"]} == {"__start__", "messages", "facts"}
    inline = up["checkpoints"][-1][3]["channel_values"]
    assert inline["turns"] == 2 and inline["stage"] == "recorded" and inline["note"] is None
    pending = [(w[2], w[3], w[4]) for w in up["writes"] if w[0] == last]
    assert ("~__pregel_pull, approve", -3, "__interrupt__") in pending
    assert ("~__pregel_pull, approve", -4, "__resume__") in pending
    assert ("~__pregel_pull, audit", 0, "note") in pending

    # Held, a store leaves out the ordinary writes of a checkpoint whose next checkpoint
    # it stores too; all else is upstream's, row for row.
    batched = tables["batched"]
    # the first run stores all four checkpoints in one store, at its interrupt
    stored_with_child = {f"checkpoint-{n}" for n in range(len(up["checkpoints"]) - 1)}
    assert batched["writes"] == [
        w for w in up["writes"] if w[0] not in stored_with_child or w[3] < 0
    ]
    assert len(batched["writes"]) < len(up["writes"])
    assert [w for w in batched["writes"] if w[0] == last] == [
        w for w in up["writes"] if w[0] == last
    ]
    assert ours["writes"] == up["writes"]
    for mine in (ours, batched):
        assert mine["checkpoints"] == up["checkpoints"]
        assert mine["blobs"] == up["blobs"]
        for n, (checkpoint_id, parent, *_) in enumerate(mine["checkpoints"]):
            assert checkpoint_id == f"checkpoint-{n}"
            assert parent == (f"checkpoint-{n - 1}" if n else None)


async def test_both_savers_load_the_same_tuples(pool: AsyncConnectionPool[Any]) -> None:
    threads = await run_both(pool)
    up_saver, our_saver = AsyncPostgresSaver(pool), PostgresCheckpointer(pool)
    latest = {}
    for thread_id, _ in threads.values():
        config = thread_config(thread_id)
        by_upstream = await up_saver.aget_tuple(config)
        by_ours = await our_saver.aget_tuple(config)
        assert by_upstream is not None and by_upstream.pending_writes
        assert by_ours == by_upstream
        listed_by_upstream = [t async for t in up_saver.alist(config)]
        listed_by_ours = [t async for t in our_saver.alist(config)]
        assert len(listed_by_ours) == 4
        assert listed_by_ours == listed_by_upstream
        for t in listed_by_ours[1:]:  # each by id, parent configs included
            assert await our_saver.aget_tuple(t.config) == await up_saver.aget_tuple(t.config)
        latest[thread_id] = by_ours

    # Written by upstream and loaded by upstream == written by ours and loaded by ours.
    up_thread, up_ids = threads["up"]
    up_latest = normalise(latest[up_thread], up_ids)
    for name in ("ours", "batched"):
        our_thread, our_ids = threads[name]
        ours_latest = normalise(latest[our_thread], our_ids)
        assert ours_latest == up_latest
        channels = {channel for _, channel, _ in ours_latest[4]}
        assert {"__interrupt__", "note", "messages"} <= channels


class CountingAsyncio:
    """Stands in for `asyncio` inside upstream's module, counting `to_thread` calls."""

    def __init__(self) -> None:
        self.to_thread_calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def to_thread(self, func: Any, /, *args: Any, **kwargs: Any) -> Any:
        self.to_thread_calls += 1
        return await asyncio.to_thread(func, *args, **kwargs)


async def count_to_thread(saver: AsyncPostgresSaver, counter: CountingAsyncio) -> dict[str, int]:
    """`to_thread` calls made by each method, on a checkpoint with a blob and inline values."""
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {"facts": {"lang": "en"}, "turns": 1, "note": None}
    checkpoint["channel_versions"] = {"facts": version, "turns": version, "note": version}
    metadata: Any = {"source": "input", "step": -1, "parents": {}}
    counts = {}

    counter.to_thread_calls = 0
    config = thread_config(f"count-{uuid.uuid4().hex}")
    saved = await saver.aput(config, checkpoint, metadata, checkpoint["channel_versions"])
    counts["aput"], counter.to_thread_calls = counter.to_thread_calls, 0
    await saver.aput_writes(saved, [("note", "x"), ("facts", {"order": 1})], "task-1")
    await saver.aput_writes(saved, [("__interrupt__", [Interrupt("ok?")])], "task-2")
    counts["aput_writes"], counter.to_thread_calls = counter.to_thread_calls, 0
    loaded = await saver.aget_tuple(saved)
    counts["aget_tuple"] = counter.to_thread_calls
    assert loaded is not None and len(loaded.pending_writes or []) == 3
    return counts


async def test_ours_makes_no_worker_thread_hops(
    pool: AsyncConnectionPool[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = CountingAsyncio()
    monkeypatch.setattr(upstream_aio, "asyncio", counter)

    upstream = await count_to_thread(AsyncPostgresSaver(pool), counter)
    assert all(calls >= 1 for calls in upstream.values()), upstream  # the counter counts

    ours = await count_to_thread(PostgresCheckpointer(pool), counter)
    assert ours == {"aput": 0, "aput_writes": 0, "aget_tuple": 0}

    counter.to_thread_calls = 0
    await run_to_interrupt(PostgresCheckpointer(pool), f"ours-{uuid.uuid4().hex}")
    assert counter.to_thread_calls == 0


async def test_the_service_checkpoints_through_it(settings: Settings) -> None:
    async with build_services(settings) as services:
        assert isinstance(services.runs.graph.checkpointer, PostgresCheckpointer)


async def count_round_trips(saver: AsyncPostgresSaver, *, batched: bool) -> int:
    """Cursors the saver opens (one round trip each) to run the graph to its interrupt."""
    opened = 0
    cursor = saver._cursor

    def counting(**kwargs: Any) -> Any:
        nonlocal opened
        opened += 1
        return cursor(**kwargs)

    saver._cursor = counting  # type: ignore[method-assign]
    await run_to_interrupt(saver, f"count-{uuid.uuid4().hex}", batched=batched)
    return opened


async def test_held_rows_ride_in_few_round_trips(pool: AsyncConnectionPool[Any]) -> None:
    # Plain, 13: two loads, 4 checkpoints, 7 write batches (the input's, greet's,
    # record's, audit's, and the three special ones: interrupt, resume, interrupt + resume).
    plain = await count_round_trips(PostgresCheckpointer(pool), batched=False)
    held = await count_round_trips(PostgresCheckpointer(pool), batched=True)
    # Held, 6. The first run: its load; its 4 checkpoints and the writes before the
    # interrupt, stored with the interrupt; audit's writes, which land after it, when the
    # block ends. The resume: its load, then its resume write and the second interrupt,
    # each stored at once as upstream stores them.
    assert (plain, held) == (13, 6)


async def test_held_rows_wait_for_a_write_an_error_or_interrupt_or_the_end(
    pool: AsyncConnectionPool[Any],
) -> None:
    saver = PostgresCheckpointer(pool)
    metadata: Any = {"source": "loop", "step": 0, "parents": {}}
    thread_id = f"wait-{uuid.uuid4().hex}"

    async def stored_checkpoints() -> int:
        return len(await fetch(pool, "checkpoints", thread_id))

    async def stored_writes() -> list[tuple[str, str]]:
        rows = await fetch(pool, "checkpoint_writes", thread_id)
        return sorted((r["task_id"], r["channel"]) for r in rows)

    def new_checkpoint() -> Any:
        return {**empty_checkpoint(), "id": str(uuid.uuid4())}

    async with saver.held_until_needed():
        input_metadata: Any = {"source": "input", "step": -1, "parents": {}}
        first = await saver.aput(thread_config(thread_id), new_checkpoint(), input_metadata, {})
        saved = await saver.aput(first, new_checkpoint(), metadata, {})
        await saver.aput_writes(saved, [("note", "x")], "task-1")
        assert (await stored_checkpoints(), await stored_writes()) == (0, [])

        # an interrupt (or an error) is stored at once, with everything held before it
        await saver.aput_writes(saved, [("__interrupt__", [Interrupt("ok?")])], "task-2")
        assert await stored_checkpoints() == 2
        assert await stored_writes() == [("task-1", "note"), ("task-2", "__interrupt__")]

        # a write to the shop asks for what is held (execute_write calls store_held)
        following = await saver.aput(saved, new_checkpoint(), {**metadata, "step": 1}, {})
        assert await stored_checkpoints() == 2
        await store_held()
        assert await stored_checkpoints() == 3
        await store_held()  # nothing held: no round trip, no error

        await saver.aput(following, new_checkpoint(), {**metadata, "step": 2}, {})
        await saver.aput_writes(saved, [("note", "y")], "task-3")
        assert await stored_checkpoints() == 3
    # the block ended (the run finished, failed or was cancelled): the rest is stored
    assert await stored_checkpoints() == 4
    assert ("task-3", "note") in await stored_writes()
    # outside a run's block, everything is stored at once, as upstream does
    await saver.aput_writes(saved, [("note", "z")], "task-4")
    assert ("task-4", "note") in await stored_writes()
    await store_held()  # outside a block: nothing to do


async def test_json_orjson_refuses_is_stored_as_upstream_stores_it(
    pool: AsyncConnectionPool[Any],
) -> None:
    # Ours encodes a checkpoint's JSON with orjson, which refuses integers past 64 bits
    # and non-string keys; those go through `json`, as upstream's do.
    stored = {}
    for saver in (AsyncPostgresSaver(pool), PostgresCheckpointer(pool)):
        thread_id = f"json-{uuid.uuid4().hex}"
        checkpoint = empty_checkpoint()
        metadata: Any = {"source": "input", "step": -1, "parents": {}, "big": 2**70, "ok": "é"}
        await saver.aput(thread_config(thread_id), checkpoint, metadata, {})
        (row,) = await fetch(pool, "checkpoints", thread_id)
        stored[type(saver).__name__] = (row["metadata"], row["checkpoint"]["channel_versions"])
    assert stored["PostgresCheckpointer"] == stored["AsyncPostgresSaver"]
    assert stored["PostgresCheckpointer"][0]["big"] == 2**70


async def test_a_store_sends_each_statement_once_with_all_its_rows(
    pool: AsyncConnectionPool[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[int] = []
    executemany = psycopg.AsyncCursor.executemany

    async def counted(self: Any, query: Any, params_seq: Any, **kwargs: Any) -> None:
        sent.append(len(params_seq))
        await executemany(self, query, params_seq, **kwargs)

    saver, thread_id = PostgresCheckpointer(pool), f"once-{uuid.uuid4().hex}"
    monkeypatch.setattr(psycopg.AsyncCursor, "executemany", counted)
    async with saver.held_until_needed():
        config = thread_config(thread_id)
        for step in range(3):
            metadata: Any = {"source": "loop", "step": step, "parents": {}}
            config = await saver.aput(config, empty_checkpoint(), metadata, {})
            await saver.aput_writes(config, [("note", f"n{step}"), ("x", step)], f"t{step}")
        assert sent == []
    # the checkpoints' statement, then the writes': only the last checkpoint's, as the
    # first two's next checkpoints went in the same transaction
    assert sent == [3, 2]
    assert len(await fetch(pool, "checkpoints", thread_id)) == 3
    writes = await fetch(pool, "checkpoint_writes", thread_id)
    assert sorted(r["task_id"] for r in writes) == ["t2", "t2"]
