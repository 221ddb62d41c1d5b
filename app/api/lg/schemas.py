"""Request bodies of the Platform API, as the official SDKs send them.

Fields cs-agent cannot honour are declared so that they are refused by name (a typed
422, see `refusals`), not dropped in silence; unknown fields are ignored, as a newer
SDK may send more.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.api.schemas import Line

StreamModeName = str


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class CheckpointRef(_Body):
    checkpoint_id: Line | None = Field(default=None, max_length=64)
    checkpoint_ns: str | None = None
    thread_id: str | None = None
    checkpoint_map: dict[str, Any] | None = None


class ThreadCreate(_Body):
    thread_id: Line | None = Field(default=None, max_length=64)
    metadata: dict[str, Any] | None = None
    if_exists: Literal["raise", "do_nothing"] | None = None
    supersteps: list[Any] | None = None
    ttl: Any = None


class ThreadUpdate(_Body):
    """PATCH /threads/{id}: metadata to merge into the thread's."""

    metadata: dict[str, Any] | None = None
    ttl: Any = None


class ThreadCount(_Body):
    metadata: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    status: Literal["idle", "busy", "interrupted", "error"] | None = None


class ThreadSearch(_Body):
    metadata: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    ids: list[Line] | None = Field(default=None, max_length=1000)
    status: Literal["idle", "busy", "interrupted", "error"] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0, le=100_000)
    sort_by: Literal["thread_id", "status", "created_at", "updated_at"] | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[str] | None = None
    extract: dict[str, Any] | None = None


class HistoryQuery(_Body):
    limit: int = Field(default=10, ge=1, le=200)
    before: CheckpointRef | Line | None = None
    metadata: dict[str, Any] | None = None
    checkpoint: CheckpointRef | None = None
    select: list[str] | None = None


class StateAtCheckpoint(_Body):
    checkpoint: CheckpointRef
    subgraphs: bool = False


class AssistantSearch(_Body):
    graph_id: str | None = None
    name: str | None = None
    metadata: dict[str, Any] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)


class CommandIn(_Body):
    resume: Any = None
    update: Any = None
    goto: Any = None


class RunCreate(_Body):
    """POST /threads/{id}/runs[/stream|/wait]."""

    assistant_id: str = Field(min_length=1, max_length=128)
    input: Any = None
    command: CommandIn | None = None
    checkpoint: CheckpointRef | None = None
    checkpoint_id: Line | None = Field(default=None, max_length=64)
    stream_mode: StreamModeName | list[StreamModeName] = "values"
    stream_subgraphs: bool = False
    stream_resumable: bool = False
    on_disconnect: Literal["cancel", "continue"] = "continue"
    multitask_strategy: str | None = None
    if_not_exists: Literal["create", "reject"] | None = None
    on_completion: Literal["delete", "keep"] | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    interrupt_before: Any = None
    interrupt_after: Any = None
    webhook: str | None = None
    after_seconds: float | None = None
    durability: str | None = None
    checkpoint_during: bool | None = None
    feedback_keys: list[str] | None = None
    strict_resume: bool | None = None
    langsmith_tracer: Any = None


# -- the store (app/api/lg/store.py) --------------------------------------------------------

MAX_KEY = 256
MAX_NAMESPACE_DEPTH = 10  # labels, the two of ["users", <id>] included
Namespace = list[str]


class StorePut(_Body):
    namespace: Namespace = Field(max_length=MAX_NAMESPACE_DEPTH)
    key: str = Field(min_length=1, max_length=MAX_KEY)
    value: dict[str, Any]
    index: Literal[False] | list[str] | None = None
    ttl: float | None = None


class StoreDelete(_Body):
    namespace: Namespace = Field(max_length=MAX_NAMESPACE_DEPTH)
    key: str = Field(min_length=1, max_length=MAX_KEY)


class StoreSearch(_Body):
    namespace_prefix: Namespace = Field(default_factory=list, max_length=MAX_NAMESPACE_DEPTH)
    filter: dict[str, Any] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0, le=10_000)
    query: str | None = None
    refresh_ttl: bool | None = None


class StoreNamespaces(_Body):
    prefix: Namespace | None = Field(default=None, max_length=MAX_NAMESPACE_DEPTH)
    suffix: Namespace | None = Field(default=None, max_length=MAX_NAMESPACE_DEPTH)
    max_depth: int | None = Field(default=None, ge=1)
    limit: int = Field(default=100, ge=1, le=1000)
    offset: int = Field(default=0, ge=0, le=10_000)
