"""The checkpointer: LangGraph's AsyncPostgresSaver, serialising on the event loop.

Upstream hands each (de)serialisation to `asyncio.to_thread`, which keeps the loop free
when a state is megabytes. Ours are tens of kilobytes (the summary keeps the working set
short), so the hop costs more than the work: a turn makes 9 or 10 of them (each checkpoint,
each step's writes, the load at the start), and running them inline gave 13-16% more turns/s
under load (benchmarks/FINDINGS.md). The SQL, the rows and the loaded tuples are upstream's:
a test writes the same checkpoints through both savers and compares the tables.
"""

from __future__ import annotations

from collections.abc import Sequence
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
        async with self._cursor(pipeline=True) as cur:
            if changed:
                rows = self._dump_blobs(thread_id, checkpoint_ns, blobs, changed)
                await cur.executemany(self.UPSERT_CHECKPOINT_BLOBS_SQL, rows)
            await cur.execute(
                self.UPSERT_CHECKPOINTS_SQL,
                (
                    thread_id,
                    checkpoint_ns,
                    checkpoint["id"],
                    configurable.get("checkpoint_id"),
                    Jsonb(stored),
                    Jsonb(get_serializable_checkpoint_metadata(config, metadata)),
                ),
            )
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
        async with self._cursor(pipeline=True) as cur:
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
