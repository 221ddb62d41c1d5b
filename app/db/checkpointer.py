"""The checkpointer: LangGraph's AsyncPostgresSaver, serialising on the event loop.

Upstream hands each (de)serialisation to `asyncio.to_thread`, which keeps the loop free
when a state is megabytes. Ours are tens of kilobytes (the summary keeps the working set
short), so the hop costs more than the work: a turn makes 9 or 10 of them (each checkpoint,
each step's writes, the load at the start), and running them inline gave 13-16% more turns/s
under load (benchmarks/FINDINGS.md). The SQL, the rows and the loaded tuples are upstream's:
a test writes the same checkpoints through both savers and compares the tables.

Within `writes_with_next_checkpoint()` (a run of the service), a step's task writes are not
stored on their own: they wait for the step's checkpoint and go in its round trip, one
pipeline instead of two. A step's writes then land with the checkpoint that follows them,
or (a run that ended between the two: an error, a cancel) when the run ends. Errors and
interrupts are stored at once, as upstream does. The run's input checkpoint waits too, for
the checkpoint of the START step, which only routes the input and does no I/O: every
checkpoint a node starts from is still stored before the node runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

_INLINE_TYPES = (str, int, float, bool)

# (query, rows) batches waiting for the next checkpoint of the run that set the list. The
# graph's background tasks copy the run's context, so they all append to the same list.
_Batch = tuple[str, list[Any]]
_deferred: ContextVar[list[_Batch] | None] = ContextVar("deferred_writes", default=None)


def _taken(waiting: list[_Batch] | None) -> list[_Batch]:
    """Everything waiting, leaving the list empty. Taken before the first await, so a write
    that arrives while they are stored waits for the next round trip."""
    if not waiting:
        return []
    taken = waiting[:]
    waiting.clear()
    return taken


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


class PostgresCheckpointer(AsyncPostgresSaver):
    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        values = checkpoint["channel_values"]
        if any(isinstance(v, _DeltaSnapshot) for v in values.values()):
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
            Jsonb(stored),
            Jsonb(get_serializable_checkpoint_metadata(config, metadata)),
        )
        batches.append((self.UPSERT_CHECKPOINTS_SQL, [row]))
        waiting = _deferred.get()
        if waiting is not None and metadata.get("source") == "input":
            # The run's input, before the START step that only routes it: stored with that
            # step's checkpoint, which follows without any I/O in between.
            waiting.extend(batches)
        else:
            await self._execute(_taken(waiting) + batches)
        return _config(thread_id, checkpoint_ns, checkpoint["id"])

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
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
        waiting = _deferred.get()
        if waiting is not None and not special:
            waiting.append((query, rows))  # stored with the step's checkpoint
            return
        await self._execute([(query, rows)])

    @asynccontextmanager
    async def writes_with_next_checkpoint(self) -> AsyncIterator[None]:
        """Store each step's task writes in the round trip of the checkpoint that follows,
        and the run's input checkpoint with the first step's. What is still waiting when
        the block ends (the run stopped mid-step) is stored then."""
        waiting: list[_Batch] = []
        token = _deferred.set(waiting)
        try:
            yield
        finally:
            _deferred.reset(token)
            if waiting:
                await self._execute(_taken(waiting))

    async def _execute(self, batches: list[_Batch]) -> None:
        """The batches in order, in one pipeline: one round trip."""
        async with self._cursor(pipeline=True) as cur:
            for query, rows in batches:
                await cur.executemany(query, rows)

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


def run_batching(saver: object) -> AbstractAsyncContextManager[None]:
    """The block one run of a graph goes in: `writes_with_next_checkpoint()` when the graph
    checkpoints through `PostgresCheckpointer`, nothing otherwise."""
    if isinstance(saver, PostgresCheckpointer):
        return saver.writes_with_next_checkpoint()
    return nullcontext()
