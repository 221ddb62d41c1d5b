"""The read retry (app/errors.py): a GET whose database connection died runs again, up to
three tries, and the client sees one response: the last try's."""

from __future__ import annotations

from typing import Any

import pytest

from app.errors import CONNECTION_LOST, READ_TRIES, RetryLostReads


def app_losing(times: int, calls: list[str]) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        calls.append(scope["method"])
        lost = len(calls) <= times
        if lost:
            scope.setdefault("state", {})[CONNECTION_LOST] = True
        status = 503 if lost else 200
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": str(len(calls)).encode()})

    return app


async def call(app: Any, method: str) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await RetryLostReads(app)({"type": "http", "method": method, "path": "/x"}, receive, send)
    return sent


@pytest.mark.parametrize("lost", [0, 1, READ_TRIES - 1])
async def test_a_read_whose_connection_died_runs_again_and_answers_once(lost: int) -> None:
    calls: list[str] = []
    sent = await call(app_losing(lost, calls), "GET")
    assert len(calls) == lost + 1
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 200 and sent[1]["body"] == str(lost + 1).encode()


async def test_after_the_last_try_the_failure_is_the_answer() -> None:
    calls: list[str] = []
    sent = await call(app_losing(READ_TRIES + 5, calls), "GET")
    assert len(calls) == READ_TRIES
    assert sent[0]["status"] == 503


async def test_a_post_is_never_repeated() -> None:
    calls: list[str] = []
    sent = await call(app_losing(1, calls), "POST")
    assert calls == ["POST"] and sent[0]["status"] == 503
