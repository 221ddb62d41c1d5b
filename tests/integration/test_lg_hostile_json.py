"""Client JSON the database cannot keep (a NUL, an unpaired surrogate, a number past a
double, nesting past the limit) is a typed 422 on every route that stores or compares it,
never a 500: the bodies schemathesis found (issue 45), sent as raw JSON text over real HTTP,
and the store's filter as the store turns it into SQL."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from app.api.clientjson import MAX_DEPTH
from tests.integration.agent_harness import load_small_shop
from tests.integration.api_harness import LiveServer

NOAH = "noah_brown_6181"
ITEMS = ["users", NOAH, "notes"]

# Raw JSON text: a lone surrogate and 1e400 cannot be written by a JSON encoder.
SURROGATE = '{"note": "\\ud899"}'
NUL_VALUE = '{"note": "a\\u0000b"}'
NUL_KEY = '{"a\\u0000b": 1}'
HUGE_NUMBER = '{"amount": 1.8e308}'
# one level past the limit, the object counted
TOO_DEEP = '{"a": ' + "[" * MAX_DEPTH + "1" + "]" * MAX_DEPTH + "}"
HOSTILE = {
    "surrogate": SURROGATE,
    "nul value": NUL_VALUE,
    "nul key": NUL_KEY,
    "huge number": HUGE_NUMBER,
    "too deep": TOO_DEEP,
}


@pytest.fixture
async def client(
    server: LiveServer, db: AsyncConnectionPool[Any]
) -> AsyncIterator[httpx.AsyncClient]:
    await load_small_shop(db)
    async with server.client(headers=server.headers(NOAH)) as http:
        yield http


async def send(http: httpx.AsyncClient, method: str, path: str, body: str) -> httpx.Response:
    headers = {"content-type": "application/json"}
    return await http.request(method, path, content=body.encode(), headers=headers)


def refused(response: httpx.Response, code: str = "client_json_invalid") -> str:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    assert "Traceback" not in error["message"]
    return str(error["message"])


class TestThreadMetadata:
    @pytest.mark.parametrize("metadata", list(HOSTILE.values()), ids=list(HOSTILE))
    async def test_create_refuses_what_jsonb_cannot_keep(
        self, client: httpx.AsyncClient, metadata: str
    ) -> None:
        message = refused(await send(client, "POST", "/lg/threads", f'{{"metadata": {metadata}}}'))
        assert message.startswith("metadata: ")

    @pytest.mark.parametrize("metadata", list(HOSTILE.values()), ids=list(HOSTILE))
    async def test_update_refuses_it_and_keeps_the_metadata(
        self, client: httpx.AsyncClient, metadata: str
    ) -> None:
        created = await client.post("/lg/threads", json={"metadata": {"channel": "web"}})
        thread_id = created.json()["thread_id"]
        body = f'{{"metadata": {metadata}}}'
        refused(await send(client, "PATCH", f"/lg/threads/{thread_id}", body))
        kept = (await client.get(f"/lg/threads/{thread_id}")).json()["metadata"]
        assert kept["channel"] == "web" and set(kept) == {"channel", "graph_id", "assistant_id"}

    async def test_search_refuses_it(self, client: httpx.AsyncClient) -> None:
        refused(await send(client, "POST", "/lg/threads/search", f'{{"metadata": {NUL_VALUE}}}'))
        refused(await send(client, "POST", "/lg/threads/count", f'{{"metadata": {SURROGATE}}}'))

    async def test_what_jsonb_keeps_is_stored_as_sent(self, client: httpx.AsyncClient) -> None:
        metadata = {
            "deep": [[[[[[["eight levels"]]]]]]],
            "tab\tand emoji 🦜": "\u0001 control characters other than NUL are JSON",
            "big": 10**40,
        }
        body = {"metadata": {**metadata, "max": 1.7976931348623157e308}}  # the largest double
        created = await client.post("/lg/threads", json=body)
        assert created.status_code == 200, created.text
        stored = created.json()["metadata"]
        assert {k: stored[k] for k in metadata} == metadata
        assert float(stored["max"]) == 1.7976931348623157e308  # jsonb writes it out in full


class TestRunMetadata:
    async def test_a_run_refuses_it_before_it_starts(self, client: httpx.AsyncClient) -> None:
        thread_id = (await client.post("/lg/threads", json={})).json()["thread_id"]
        body = '{"assistant_id": "agent", "input": null, "metadata": ' + NUL_VALUE + "}"
        refused(await send(client, "POST", f"/lg/threads/{thread_id}/runs", body))
        body = '{"assistant_id": "agent", "input": {"messages": [' + SURROGATE + "]}}"
        refused(await send(client, "POST", f"/lg/threads/{thread_id}/runs/wait", body))
        runs = await client.get(f"/lg/threads/{thread_id}/runs")
        assert runs.json() == []


class TestStore:
    @pytest.mark.parametrize("value", list(HOSTILE.values()), ids=list(HOSTILE))
    async def test_a_value_is_refused(self, client: httpx.AsyncClient, value: str) -> None:
        body = f'{{"namespace": {json.dumps(ITEMS)}, "key": "k", "value": {value}}}'
        refused(await send(client, "PUT", "/lg/store/items", body))

    @pytest.mark.parametrize(
        "filter_",
        [
            '{"a": {"b": [1, {"c": null}]}}',  # a nested object reads as operators
            '{"a": {"$gt": [1]}}',
            '{"a": {"$regex": "x"}}',
            SURROGATE,
            NUL_VALUE,
            NUL_KEY,
            HUGE_NUMBER,
        ],
    )
    async def test_a_filter_is_refused(self, client: httpx.AsyncClient, filter_: str) -> None:
        response = await send(client, "POST", "/lg/store/items/search", f'{{"filter": {filter_}}}')
        assert refused(response, "store_filter_invalid").startswith("filter: ")

    async def test_a_filter_of_values_and_operators_finds_items(
        self, client: httpx.AsyncClient
    ) -> None:
        for key, value in {"a": {"n": 1, "tag": "x"}, "b": {"n": 5, "tag": "y"}}.items():
            put = await client.put(
                "/lg/store/items", json={"namespace": ITEMS, "key": key, "value": value}
            )
            assert put.status_code == 204, put.text

        async def keys(filter_: dict[str, Any]) -> list[str]:
            body = {"namespace_prefix": ITEMS, "filter": filter_}
            found = await client.post("/lg/store/items/search", json=body)
            assert found.status_code == 200, found.text
            return sorted(item["key"] for item in found.json()["items"])

        assert await keys({"tag": "x"}) == ["a"]
        assert await keys({"tag": {"$ne": "x"}}) == ["b"]
        assert await keys({"n": {"$gt": 2}}) == ["b"]
        assert await keys({"n": {"$eq": 1}, "tag": "x"}) == ["a"]
