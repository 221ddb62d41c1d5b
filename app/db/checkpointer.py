"""The checkpointer: LangGraph's AsyncPostgresSaver, serialising on the event loop.

Upstream hands each (de)serialisation to `asyncio.to_thread`, which keeps the loop free
when a state is megabytes. Ours are tens of kilobytes (the summary keeps the working set
short), so the hop costs more than the work: a turn makes 9 or 10 of them (each checkpoint,
each step's writes, the load at the start), and running them inline gave 13-16% more turns/s
under load (benchmarks/FINDINGS.md). The SQL, the rows and the loaded tuples are upstream's:
a test writes the same checkpoints through both savers and compares the tables.

Within `held_until_needed()` (a run of the service) nothing is stored step by step. A
step's checkpoint and its task writes wait, in order, and all that has waited goes in one
pipeline, one round trip, when one of these comes first:
- a write tool is about to change the shop (`store_held()`, called by `execute_write`): the
  checkpoint that holds its tool call is durable before the write commits, so a crash after
  the commit resumes at that call and replays the recorded outcome instead of writing again;
- an error or an interrupt is written (stored at once, as upstream does);
- the run ends, before `done` reaches the client: in the transaction that records its
  outcome and releases its lease when it ended well (`HeldRows.store_then`: one commit
  instead of two), on their own before the outcome otherwise.
A read-only turn so stores its five checkpoints (input, START, agent, tools, agent) in one
round trip instead of four. Every step is still stored, so history and rewind see them all.
What is held rides on the run's turn (app/turn.py), which every step of the run finds.
The cost: a process that dies mid-turn loses that turn's unstored steps, the customer's
message among them, and the thread continues from the last stored step (the turn before,
or the last write's call). Nothing the shop did is lost: every effect waits for its call.

A step's task writes are what its next checkpoint is made of: LangGraph reads them back
only to finish a step whose next checkpoint was never stored (upstream's `exit` durability
never stores them). So a store leaves out the ordinary writes of a checkpoint whose next
checkpoint it stores too, in the same transaction: they could never be read. Errors,
interrupts and resumes are kept, and so is every write of the newest checkpoint (an
interrupted step's finished tasks). A read turn on a new thread stores no write rows (18
before); the rows that remain are upstream's.

Within `prefetched()` (a run), the thread's newest checkpoint is the row the run's opening
statement read (app/runs/statements.py), so loading it costs no round trip; the run's first
store ends that. And each operation takes its own pooled connection without upstream's lock
(one per saver, which made every read and store of the process wait for the one before).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    asynccontextmanager,
    contextmanager,
    nullcontext,
)
from contextvars import Token
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from psycopg import AsyncCursor
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from app.db.leases import fence
from app.db.trips import one_round_trip
from app.jsonbytes import json_bytes
from app.tracing import traced
from app.turn import Batch, Turn, current_lease, current_turn

_INLINE_TYPES = (str, int, float, bool)


def _json_dumps(value: Any) -> bytes | str:
    """A checkpoint's or its metadata's JSON: orjson takes 0.6 µs where the standard
    library's `json`, psycopg's default, takes 11-14 (a 1.8 kB checkpoint, five a turn).
    What orjson refuses (a key that is not a string, an integer past 64 bits) is left to
    `json`, which accepts it or fails as it always did."""
    return json_bytes(value) or json.dumps(value)


_Batch = Batch  # (query, rows)


def _enter(turn: Turn | None) -> tuple[Turn, Token[Turn | None] | None]:
    """`turn`, else the current one, else a new one (a graph driven outside the run
    service: tests, benchmarks, the CLI); and the token that makes it the current turn
    until the block ends, when it was not (a run's turn is: nothing to undo)."""
    turn = turn or current_turn.get() or Turn()
    return turn, None if current_turn.get() is turn else current_turn.set(turn)


def _without_superseded_writes(
    batches: list[_Batch], checkpoints_sql: str, writes_sql: str
) -> list[_Batch]:
    """`batches` less the ordinary writes of each checkpoint whose next checkpoint (its
    child) is among them (see the module's docstring)."""
    parents = {
        (row[0], row[1], row[3])  # thread_id, checkpoint_ns, parent_checkpoint_id
        for query, rows in batches
        if query == checkpoints_sql
        for row in rows
        if row[3] is not None
    }
    if not parents:
        return batches
    kept: list[_Batch] = []
    for query, rows in batches:
        if query == writes_sql:
            # a write row: thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,
            # idx, channel, type, blob
            rows = [r for r in rows if (r[0], r[1], r[2]) not in parents or r[6] in WRITES_IDX_MAP]
            if not rows:
                continue
        kept.append((query, rows))
    return kept


@dataclass
class HeldRows:
    """What a run's checkpointer holds back, in order. The run's turn holds it, so every
    step of the run appends to the same list."""

    saver: PostgresCheckpointer
    batches: list[_Batch] = field(default_factory=list)
    # A graph with delta channels rebuilds their values from the writes: every write kept.
    keeps_every_write: bool = False

    def _rows(self, batches: list[_Batch]) -> list[_Batch]:
        if self.keeps_every_write:
            return batches
        saver = self.saver
        return _without_superseded_writes(
            batches, saver.UPSERT_CHECKPOINTS_SQL, saver.INSERT_CHECKPOINT_WRITES_SQL
        )

    async def store(self, *also: _Batch) -> None:
        """Everything held, then `also`, in one round trip. The list is taken before the
        first await, so rows that arrive meanwhile wait for the next one. If the store
        fails, the rows are held again, in order, for the next attempt (the statements are
        upserts), and the error is raised."""
        taken, self.batches = self.batches, []
        try:
            await self.saver._execute(self._rows([*taken, *also]))
        except BaseException:
            self.batches[:0] = taken
            raise

    async def store_then(self, query: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """Everything held, then `query` (the run's closing statement) in the same fenced
        transaction and round trip: the steps and the outcome commit together, or neither
        does (then the rows are held again and the error is raised). Returns its row."""
        taken, self.batches = self.batches, []
        try:
            return await self.saver._execute(self._rows(taken), then=(query, params))
        except BaseException:
            self.batches[:0] = taken
            raise


async def store_held() -> None:
    """Store what the current run's checkpointer holds back, now; nothing outside a run."""
    turn = current_turn.get()
    held = turn.held if turn is not None else None
    if held is not None and held.batches:
        await held.store()


@dataclass
class _Prefetched:
    """The newest checkpoint of a thread as the run's opening statement read it (`row`;
    None: the thread has none), good until the run stores anything."""

    thread_id: str
    row: dict[str, Any] | None
    live: bool = True

    def answers(self, config: RunnableConfig) -> bool:
        configurable = config["configurable"]
        return (
            self.live
            and configurable["thread_id"] == self.thread_id
            and configurable.get("checkpoint_ns", "") == ""
            and not get_checkpoint_id(config)
            # upstream migrates the pending sends of checkpoints before v4 on load
            and (self.row is None or self.row["checkpoint"].get("v", 0) >= 4)
        )


@contextmanager
def prefetched(
    thread_id: str, row: dict[str, Any] | None, turn: Turn | None = None
) -> Iterator[None]:
    """Within the block, the newest checkpoint of `thread_id` is `row` (the columns of the
    saver's SELECT), so loading it costs no round trip; the first store ends that. It rides
    on `turn` (by default the current one; a new one outside a run)."""
    turn, token = _enter(turn)
    before, turn.prefetched = turn.prefetched, _Prefetched(thread_id, row)
    try:
        yield
    finally:
        turn.prefetched = before
        if token is not None:
            current_turn.reset(token)


def _stored_since_prefetch(turn: Turn | None) -> None:
    if turn is not None and turn.prefetched is not None:
        turn.prefetched.live = False


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


class PostgresCheckpointer(AsyncPostgresSaver):
    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        """Upstream's cursor without upstream's lock. The lock is one `asyncio.Lock` per
        saver, held for the whole of every read and store: right for a saver on one shared
        connection, but on a pool it made every checkpoint read and store of the process
        wait for the one before it, each a round trip (under load, turns queued on it with
        the CPU half idle). On a pool each operation has a connection of its own."""
        if not isinstance(self.conn, AsyncConnectionPool) or self.pipe is not None:
            async with super()._cursor(pipeline=pipeline) as cur:
                yield cur
            return
        async with self.conn.connection() as conn:
            if pipeline and self.supports_pipeline:
                async with conn.pipeline(), conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur
            elif pipeline:
                async with (
                    conn.transaction(),
                    conn.cursor(binary=True, row_factory=dict_row) as cur,
                ):
                    yield cur
            else:
                async with conn.cursor(binary=True, row_factory=dict_row) as cur:
                    yield cur

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        turn = current_turn.get()
        pre = turn.prefetched if turn is not None else None
        if pre is not None and pre.answers(config):
            return None if pre.row is None else await self._load_checkpoint_tuple(pre.row)
        # What this run holds back is the thread's newest state: stored before it is read.
        # A run of two graph inputs (a dead run's step finished, then the new message) read
        # the last stored checkpoint for the second, and its steps forked the chain there.
        await store_held()
        return await super().aget_tuple(config)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        turn = current_turn.get()
        _stored_since_prefetch(turn)
        values = checkpoint["channel_values"]
        if any(isinstance(v, _DeltaSnapshot) for v in values.values()):
            if turn is not None and turn.held is not None:
                turn.held.keeps_every_write = True
            await store_held()  # upstream's path stores at once: keep the order
            return await super().aput(config, checkpoint, metadata, new_versions)
        configurable = config["configurable"]
        thread_id: str = configurable["thread_id"]
        checkpoint_ns: str = configurable["checkpoint_ns"]
        # Primitives stay inline in the checkpoint row; anything else is a versioned blob.
        inline = {k: v for k, v in values.items() if v is None or isinstance(v, _INLINE_TYPES)}
        blobs = {k: v for k, v in values.items() if k not in inline}
        changed = {k: v for k, v in new_versions.items() if k in blobs}
        stored = {**checkpoint, "channel_values": inline}
        batches: list[_Batch] = []
        if changed:
            blob_rows = self._dump_blobs(thread_id, checkpoint_ns, blobs, changed)
            batches.append((self.UPSERT_CHECKPOINT_BLOBS_SQL, blob_rows))
        row = (
            thread_id,
            checkpoint_ns,
            checkpoint["id"],
            configurable.get("checkpoint_id"),
            Jsonb(stored, dumps=_json_dumps),
            Jsonb(get_serializable_checkpoint_metadata(config, metadata), dumps=_json_dumps),
        )
        batches.append((self.UPSERT_CHECKPOINTS_SQL, [row]))
        held = turn.held if turn is not None else None
        if held is not None:
            held.batches += batches
        else:
            await self._execute(batches)
        return _config(thread_id, checkpoint_ns, checkpoint["id"])

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        turn = current_turn.get()
        _stored_since_prefetch(turn)
        # Special channels (errors, interrupts) have fixed slots and are upserted.
        special = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        query = self.UPSERT_CHECKPOINT_WRITES_SQL if special else self.INSERT_CHECKPOINT_WRITES_SQL
        configurable = config["configurable"]
        rows = self._dump_writes(
            configurable["thread_id"],
            configurable["checkpoint_ns"],
            configurable["checkpoint_id"],
            task_id,
            task_path,
            writes,
        )
        held = turn.held if turn is not None else None
        if held is None:
            await self._execute([(query, rows)])
        elif special:  # an error or an interrupt: stored now, with everything before it
            await held.store((query, rows))
        else:
            held.batches.append((query, rows))

    @asynccontextmanager
    async def held_until_needed(self, turn: Turn | None = None) -> AsyncIterator[HeldRows]:
        """Hold the block's checkpoints and writes back until a write needs them stored, an
        error or interrupt is written, or the block ends (see the module's docstring). What
        the block stored with `store_then` is not stored again. They ride on `turn` (by
        default the current one; a new one outside a run)."""
        held = HeldRows(self)
        turn, token = _enter(turn)
        before, turn.held = turn.held, held
        try:
            yield held
        finally:
            turn.held = before
            try:
                if held.batches:
                    await held.store()
            finally:
                if token is not None:
                    current_turn.reset(token)

    @traced("checkpoint store", lambda *_, **__: {"db.system.name": "postgresql"})
    async def _execute(
        self, batches: list[_Batch], then: tuple[str, dict[str, Any]] | None = None
    ) -> dict[str, Any] | None:
        """The batches in one pipeline: one round trip. The rows of one statement go in one
        `executemany`, in the order they came: a run's store is 3 or 4 calls instead of one
        per step and table, each with its own lock and pipeline bookkeeping. Only rows of
        the same statement can touch the same key (no foreign keys join these tables), so
        their order is the order that matters. `then` (a statement and its parameters) runs
        last in the same transaction; its row is returned."""
        grouped: dict[str, list[Any]] = {}
        for query, rows in batches:
            grouped.setdefault(query, []).extend(rows)
        if current_lease() is None and then is None:
            async with self._cursor(pipeline=True) as cur:
                for query, rows in grouped.items():
                    await cur.executemany(query, rows)
            return None
        # A run's store: fenced, so the rows commit only while its lease is its own, and
        # all together (still one round trip: the pipeline carries BEGIN and COMMIT too).
        async with (
            self._cursor() as cur,
            cur.connection.cursor(row_factory=dict_row) as last,  # text, as the pool's
        ):
            async with one_round_trip(cur.connection):  # a lost lease raises LeaseLost
                await fence(cur)
                for query, rows in grouped.items():
                    await cur.executemany(query, rows)
                if then is not None:
                    await last.execute(*then)
            # received with the COMMIT: reading it inside the block would cost a trip
            return await last.fetchone() if then is not None else None

    async def _load_checkpoint_tuple(self, value: DictRow) -> CheckpointTuple:
        thread_id, checkpoint_ns = value["thread_id"], value["checkpoint_ns"]
        checkpoint = value["checkpoint"]
        parent = value["parent_checkpoint_id"]
        return CheckpointTuple(
            _config(thread_id, checkpoint_ns, value["checkpoint_id"]),
            cast(
                Checkpoint,
                {
                    **checkpoint,
                    "channel_values": {
                        **(checkpoint.get("channel_values") or {}),
                        **self._load_blobs(value["channel_values"]),
                    },
                },
            ),
            value["metadata"],
            _config(thread_id, checkpoint_ns, parent) if parent else None,
            self._load_writes(value["pending_writes"]),
        )


def run_batching(
    saver: object, turn: Turn | None = None
) -> AbstractAsyncContextManager[HeldRows | None]:
    """The block one run of a graph goes in: `held_until_needed(turn)` when the graph
    checkpoints through `PostgresCheckpointer` (the block gets what it holds), nothing
    otherwise."""
    if isinstance(saver, PostgresCheckpointer):
        return saver.held_until_needed(turn)
    return nullcontext(None)
