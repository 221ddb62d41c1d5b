"""Request bodies of the Platform API, as the official SDKs send them.

Fields cs-agent cannot honour are declared so that they are refused by name (a typed
422, see `refusals`), not dropped in silence; unknown fields are ignored, as a newer
SDK may send more.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from app.api.clientjson import MAX_ITEMS, ClientJson, ClientObject
from app.api.lg import contract
from app.api.lg.store_filter import StoreFilter
from app.api.schemas import Line

StreamModeName = str


def _whole(value: Any) -> Any:
    # JSON Schema's integer holds 2.0; strict mode alone would refuse it
    return int(value) if isinstance(value, float) and value.is_integer() else value


WholeNumber = Annotated[int, BeforeValidator(_whole)]
"""An integer in strict mode: `2` and `2.0`, never `false` or `"2"`."""


class _Body(BaseModel):
    # strict: `0` is not `false` nor `false` an offset, as the document says (the SDKs
    # send JSON types)
    model_config = ConfigDict(extra="ignore", strict=True)


class CheckpointRef(_Body):
    checkpoint_id: Line | None = Field(default=None, max_length=64)
    checkpoint_ns: str | None = None
    thread_id: str | None = None
    checkpoint_map: ClientObject | None = None


class ThreadCreate(_Body):
    model_config = ConfigDict(extra="ignore", strict=True, json_schema_extra=contract.thread_create)

    thread_id: Line | None = Field(default=None, max_length=64)
    metadata: ClientObject | None = None
    if_exists: Literal["raise", "do_nothing"] | None = None
    supersteps: list[ClientJson] | None = Field(default=None, max_length=MAX_ITEMS)
    ttl: ClientJson = None


class ThreadUpdate(_Body):
    """PATCH /threads/{id}: metadata to merge into the thread's."""

    model_config = ConfigDict(extra="ignore", strict=True, json_schema_extra=contract.ttl_none)

    metadata: ClientObject | None = None
    ttl: ClientJson = None


class ThreadCount(_Body):
    metadata: ClientObject | None = None
    values: ClientObject | None = None
    status: Literal["idle", "busy", "interrupted", "error"] | None = None


class ThreadSearch(_Body):
    model_config = ConfigDict(extra="ignore", strict=True, json_schema_extra=contract.thread_search)

    metadata: ClientObject | None = None
    values: ClientObject | None = None
    ids: list[Line] | None = Field(default=None, max_length=1000)
    status: Literal["idle", "busy", "interrupted", "error"] | None = None
    limit: WholeNumber = Field(default=10, ge=1, le=1000)
    offset: WholeNumber = Field(default=0, ge=0, le=100_000)
    sort_by: Literal["thread_id", "status", "created_at", "updated_at"] | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[str] | None = None
    extract: ClientObject | None = None


class HistoryQuery(_Body):
    model_config = ConfigDict(extra="ignore", strict=True, json_schema_extra=contract.history_query)

    limit: WholeNumber = Field(default=10, ge=1, le=200)
    before: CheckpointRef | Line | None = None
    metadata: ClientObject | None = None
    checkpoint: CheckpointRef | None = None
    select: list[str] | None = None


class StateAtCheckpoint(_Body):
    checkpoint: CheckpointRef
    subgraphs: bool = False


class AssistantSearch(_Body):
    graph_id: str | None = None
    name: str | None = None
    metadata: ClientObject | None = None
    limit: WholeNumber = Field(default=10, ge=1, le=1000)
    offset: WholeNumber = Field(default=0, ge=0)


class CommandIn(_Body):
    model_config = ConfigDict(extra="ignore", strict=True, json_schema_extra=contract.command)

    resume: ClientJson = None
    update: ClientJson = None
    goto: ClientJson = None


class RunCreate(_Body):
    """POST /threads/{id}/runs[/stream|/wait]."""

    model_config = ConfigDict(extra="ignore", strict=True, json_schema_extra=contract.run_create)

    assistant_id: str = Field(min_length=1, max_length=128)
    input: ClientJson = None
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
    config: ClientObject | None = None
    context: ClientObject | None = None
    metadata: ClientObject | None = None
    interrupt_before: ClientJson = None
    interrupt_after: ClientJson = None
    webhook: str | None = None
    after_seconds: float | None = None
    durability: str | None = None
    checkpoint_during: bool | None = None
    feedback_keys: list[str] | None = None
    strict_resume: bool | None = None
    langsmith_tracer: ClientJson = None


# -- the store (app/api/lg/store.py) --------------------------------------------------------

MAX_KEY = 256
MAX_NAMESPACE_DEPTH = 10  # labels, the two of ["users", <id>] included
Namespace = list[str]


class StorePut(_Body):
    model_config = ConfigDict(extra="ignore", strict=True, json_schema_extra=contract.store_put)

    namespace: Namespace = Field(max_length=MAX_NAMESPACE_DEPTH)
    key: str = Field(min_length=1, max_length=MAX_KEY)
    value: ClientObject
    index: bool | list[str] | None = None
    ttl: float | None = None


class StoreDelete(_Body):
    namespace: Namespace = Field(max_length=MAX_NAMESPACE_DEPTH)
    key: str = Field(min_length=1, max_length=MAX_KEY)


class StoreSearch(_Body):
    model_config = ConfigDict(extra="ignore", strict=True, json_schema_extra=contract.store_search)

    namespace_prefix: Namespace = Field(default_factory=list, max_length=MAX_NAMESPACE_DEPTH)
    filter: StoreFilter | None = None
    limit: WholeNumber = Field(default=10, ge=1, le=1000)
    offset: WholeNumber = Field(default=0, ge=0, le=10_000)
    query: str | None = None
    refresh_ttl: bool | None = None


class StoreNamespaces(_Body):
    prefix: Namespace | None = Field(default=None, max_length=MAX_NAMESPACE_DEPTH)
    suffix: Namespace | None = Field(default=None, max_length=MAX_NAMESPACE_DEPTH)
    max_depth: Annotated[int, Field(ge=1), BeforeValidator(_whole)] | None = None
    limit: WholeNumber = Field(default=100, ge=1, le=1000)
    offset: WholeNumber = Field(default=0, ge=0, le=10_000)
