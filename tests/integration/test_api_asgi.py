"""Plain (non-streaming) routes, in-process: httpx against the ASGI app, lifespan included."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.api.auth import issue_token
from app.config import Settings
from app.main import create_app
from tests.fakellm import ScriptedModelServer
from tests.fakes.fixtures import chat_model


@pytest.fixture
async def client(
    settings: Settings, db: Any, model_server: ScriptedModelServer
) -> AsyncIterator[tuple[httpx.AsyncClient, Settings]]:
    dev = settings.model_copy(update={"app_env": "dev"})
    app = create_app(dev, model=chat_model(model_server))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as c,
    ):
        yield c, dev


def bearer(settings: Settings, user: str, role: str = "customer") -> dict[str, str]:
    token = issue_token(settings.jwt_secret.get_secret_value(), user, role=role)  # type: ignore[arg-type]
    return {"Authorization": f"Bearer {token}"}


class TestPlainRoutesInProcess:
    async def test_health_readiness_and_docs(
        self, client: tuple[httpx.AsyncClient, Settings]
    ) -> None:
        c, _ = client
        assert (await c.get("/healthz")).json() == {"status": "ok"}
        ready = (await c.get("/readyz")).json()
        assert ready["status"] == "ok" and ready["migrations"] == "head"
        assert "/threads" in (await c.get("/openapi.json")).json()["paths"]

    async def test_threads_create_list_and_not_found(
        self, client: tuple[httpx.AsyncClient, Settings]
    ) -> None:
        c, settings = client
        h = bearer(settings, "noah_brown_6181")
        created = await c.post("/threads", headers=h)
        assert created.status_code == 201
        listed = (await c.get("/threads", headers=h)).json()
        assert [t["id"] for t in listed["items"]] == [created.json()["id"]]
        other = bearer(settings, "mia_garcia_4516")
        r = await c.get(f"/threads/{created.json()['id']}/state", headers=other)
        assert r.status_code == 404
        assert r.json() == {"error": {"code": "thread_not_found", "message": "thread not found"}}

    async def test_demo_sign_in_issues_tokens_in_dev(
        self, client: tuple[httpx.AsyncClient, Settings]
    ) -> None:
        c, _ = client
        guest = (await c.post("/auth/demo", json={"role": "guest"})).json()["token"]
        me = await c.get("/threads", headers={"Authorization": f"Bearer {guest}"})
        assert me.status_code == 200
        bad = await c.post("/auth/demo", json={"user_id": "guest-x", "role": "customer"})
        assert bad.status_code == 422

    async def test_unknown_route_and_method_are_json_errors(
        self, client: tuple[httpx.AsyncClient, Settings]
    ) -> None:
        c, settings = client
        missing = await c.get("/nope/nothing", headers=bearer(settings, "noah_brown_6181"))
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        wrong = await c.put("/threads", headers=bearer(settings, "noah_brown_6181"))
        assert wrong.status_code == 405
        assert wrong.json()["error"]["code"] == "method_not_allowed"
