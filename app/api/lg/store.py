"""The store: `store.put_item / get_item / delete_item / search_items / list_namespaces`
as the official SDKs call them (`/store/items` PUT, GET, DELETE; `/store/items/search`,
`/store/namespaces` POST), scoped to the caller (app/api/lg/store_scope.py).

The agent's memory of a customer, `["users", <id>, "memory"]`, is the memory the agent
reads every turn, so writes into it keep its rules (app/memory/store.py): a documented key
(normalised: "Refund Preference" is `refund_preference`), one short line of text as
`{"value": "..."}`; anything else is a typed 422. The caller's other namespaces hold any
JSON object, within limits. As on the official server: a put or a delete answers 204, a
missing item `null`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Response
from langgraph.store.base import BaseStore, Item
from psycopg_pool import AsyncConnectionPool

from app.api.deps import Services, ServicesDep
from app.api.lg.deps import LgUser
from app.api.lg.errors import refuse
from app.api.lg.schemas import MAX_KEY, StoreDelete, StoreNamespaces, StorePut, StoreSearch
from app.api.lg.store_scope import Place, place, root, shown, visible
from app.api.routes.common import require_json
from app.identity import Principal
from app.jsonbytes import json_bytes
from app.memory.store import (
    MAX_PREFERENCES,
    PreferenceError,
    forget,
    normalise_key,
    remember,
)
from app.memory.store import (
    namespace as memory_namespace,
)

router = APIRouter(tags=["langgraph: store"])

MAX_VALUE_BYTES = 16_384
MAX_ITEMS = 1000  # a caller's items, memory aside


def _view(user: Principal, item: Item, *, score: bool = False) -> dict[str, Any]:
    value = dict(item.value)
    if item.namespace == memory_namespace(user.user_id):
        # the conversation that stored it, as the caller names their threads (a guest's
        # conversation that proved to be this customer is not the caller's to name)
        thread = value.get("thread_id")
        mine = isinstance(thread, str) and thread.startswith(f"{user.user_id}:")
        value["thread_id"] = str(thread).partition(":")[2] if mine else None
    out: dict[str, Any] = {
        "namespace": shown(user, item.namespace),
        "key": item.key,
        "value": value,
        "created_at": item.created_at.isoformat(),
        "updated_at": item.updated_at.isoformat(),
    }
    if score:
        out["score"] = None
    return out


def _memory_key(key: str) -> str:
    return normalise_key(key) or key


async def _count_items(pool: AsyncConnectionPool[Any], user: Principal) -> int:
    path = ".".join(root(user))
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM store WHERE prefix = %s OR starts_with(prefix, %s)",
            (path, path + "."),
        )
        row = await cur.fetchone()
        return int(row["n"]) if row else 0


async def _put_memory(store: BaseStore, user: Principal, body: StorePut) -> None:
    if set(body.value) != {"value"} or not isinstance(body.value["value"], str):
        refuse('a memory entry is {"value": "<one line of text>"}', "memory_value_invalid")
    try:
        await remember(
            store,
            user.user_id,
            body.key,
            body.value["value"],
            thread_id=None,
            verified_by="token",
        )
    except PreferenceError as refused:
        refuse(refused.message, "memory_value_invalid")


async def _put_item(services: Services, user: Principal, where: Place, body: StorePut) -> None:
    if len(json_bytes(body.value) or b"") > MAX_VALUE_BYTES:
        refuse(f"an item's value is limited to {MAX_VALUE_BYTES} bytes of JSON", "value_too_large")
    store = services.store
    new = await store.aget(where.stored, body.key) is None
    if new and await _count_items(services.pool, user) >= MAX_ITEMS:
        refuse(f"at most {MAX_ITEMS} items per user", "store_full")
    await store.aput(where.stored, body.key, body.value, index=False)


@router.put("/store/items", status_code=204, dependencies=[Depends(require_json)])
async def put_item(body: StorePut, user: LgUser, services: ServicesDep) -> Response:
    where = place(user, body.namespace)
    if body.ttl is not None:
        refuse("item TTLs are not supported; delete an item when done", "ttl_unsupported")
    if body.index:
        refuse("semantic search is not configured: items are not indexed", "index_unsupported")
    if where.memory:
        await _put_memory(services.store, user, body)
    else:
        await _put_item(services, user, where, body)
    return Response(status_code=204)


@router.get("/store/items")
async def get_item(
    user: LgUser,
    services: ServicesDep,
    namespace: str = Query(max_length=1024),
    key: str = Query(min_length=1, max_length=MAX_KEY),
    refresh_ttl: bool | None = None,
) -> dict[str, Any] | None:
    """`namespace` is dotted, as the SDKs send it. A missing item is `null`."""
    where = place(user, namespace.split(".") if namespace else [])
    item = await services.store.aget(where.stored, _memory_key(key) if where.memory else key)
    return None if item is None else _view(user, item)


@router.delete("/store/items", status_code=204)
async def delete_item(body: StoreDelete, user: LgUser, services: ServicesDep) -> Response:
    where = place(user, body.namespace)
    if where.memory:
        await forget(services.store, user.user_id, _memory_key(body.key))
    else:
        await services.store.adelete(where.stored, body.key)
    return Response(status_code=204)


@router.post("/store/items/search", dependencies=[Depends(require_json)])
async def search_items(
    body: StoreSearch, user: LgUser, services: ServicesDep
) -> dict[str, list[dict[str, Any]]]:
    """Newest first (by `updated_at`, as the store orders them), the memory among the
    caller's items when the prefix covers both."""
    if body.query:
        refuse(
            "semantic search is not configured; search by namespace and filter",
            "store_query_unsupported",
        )
    seen = visible(user, body.namespace_prefix)
    store: BaseStore = services.store
    window = body.offset + body.limit
    found: list[Item] = []
    if seen.memory:
        found += await store.asearch(
            memory_namespace(user.user_id), filter=body.filter, limit=MAX_PREFERENCES
        )
    if seen.items is not None:
        found += await store.asearch(seen.items, filter=body.filter, limit=window)
    found.sort(key=lambda i: i.updated_at, reverse=True)
    page = found[body.offset : window]
    return {"items": [_view(user, item, score=True) for item in page]}


@router.post("/store/namespaces", dependencies=[Depends(require_json)])
async def list_namespaces(
    body: StoreNamespaces, user: LgUser, services: ServicesDep
) -> dict[str, list[list[str]]]:
    seen = visible(user, body.prefix or [])
    store: BaseStore = services.store
    names: list[tuple[str, ...]] = []
    if seen.memory and await store.asearch(memory_namespace(user.user_id), limit=1):
        names.append(tuple(shown(user, memory_namespace(user.user_id))))
    if seen.items is not None:
        names += await store.alist_namespaces(prefix=seen.items, limit=MAX_ITEMS)
    if body.suffix:
        tail = tuple(body.suffix)
        names = [n for n in names if n[-len(tail) :] == tail]
    if body.max_depth is not None:
        names = [n[: body.max_depth] for n in names]
    unique = sorted(set(names))
    return {"namespaces": [list(n) for n in unique[body.offset : body.offset + body.limit]]}
