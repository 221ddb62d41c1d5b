"""Hostile input and headers over a real uvicorn server: typed 4xx errors, never a 5xx."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from app.demo.parsing import email_in, intent_of
from app.help.repository import sync_help_articles
from tests.fakellm import Reply, Script, ScriptedModelServer
from tests.faults.procs import ServiceProcess
from tests.integration.api_harness import LiveServer, live_server

NOAH = "noah_brown_6181"
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    settings = Settings(database_url=database_url, app_env="dev", _env_file=None)  # type: ignore[call-arg]
    with live_server(settings, scripted_model_session) as live:
        yield live


@pytest.fixture
async def client(
    server: LiveServer, db: AsyncConnectionPool[Any]
) -> AsyncIterator[httpx.AsyncClient]:
    async with server.client() as c:
        yield c


@pytest.fixture
async def session_id(client: httpx.AsyncClient, server: LiveServer) -> str:
    created = await client.post("/threads", headers=server.headers(NOAH))
    assert created.status_code == 201
    return str(created.json()["id"])


def cursor_of(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def assert_validation_error(response: httpx.Response) -> None:
    assert response.status_code == 422, response.text
    assert set(response.json()["error"]) == {"code", "message"}


class TestControlCharacters:
    @pytest.mark.parametrize(
        "path",
        [
            "/threads/{sid}/state?checkpoint_id=%00",
            "/threads/{sid}/state?checkpoint_id=abc%00def",
            "/threads/{sid}/history?before=%00",
            "/threads?cursor=%00",
            "/help?q=%00",
            "/help?q=refund%00",
        ],
    )
    async def test_nul_in_a_query_parameter_is_422(
        self, client: httpx.AsyncClient, server: LiveServer, session_id: str, path: str
    ) -> None:
        response = await client.get(path.format(sid=session_id), headers=server.headers(NOAH))
        assert_validation_error(response)

    async def test_a_cursor_that_decodes_to_nul_is_422(
        self, client: httpx.AsyncClient, server: LiveServer
    ) -> None:
        cursor = cursor_of(["2026-01-01T00:00:00+00:00", "\x00"])
        response = await client.get(f"/threads?cursor={cursor}", headers=server.headers(NOAH))
        assert_validation_error(response)

    @pytest.mark.parametrize(
        ("path", "body"),
        [
            ("/threads/{sid}/rewind", {"checkpoint_id": "\x00"}),
            ("/threads/{sid}/rewind", {"message_id": "id\x00"}),
            ("/threads/{sid}/messages", {"content": "hello\x00"}),
            ("/threads/{sid}/messages", {"content": "hi", "client_message_id": "a\x00"}),
        ],
    )
    async def test_nul_in_a_body_field_is_422(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        session_id: str,
        path: str,
        body: dict[str, str],
    ) -> None:
        response = await client.post(
            path.format(sid=session_id), json=body, headers=server.headers(NOAH)
        )
        assert_validation_error(response)

    async def test_newlines_and_tabs_in_free_text_are_accepted(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        session_id: str,
        model_server: ScriptedModelServer,
    ) -> None:
        model_server.use(Script([Reply.say("Noted.")]))
        posted = await client.post(
            f"/threads/{session_id}/messages",
            json={"content": "line one\n\tline two\r\n"},
            headers=server.headers(NOAH),
        )
        assert posted.status_code == 200, posted.text
        assert posted.json()["messages"][0]["content"] == "line one\n\tline two\r\n"
        found = await client.get("/help?q=refund%0Atiming%09gift")
        assert found.status_code == 200


class TestBodyLimit:
    async def test_a_chunked_body_over_64_kib_is_413(
        self, client: httpx.AsyncClient, server: LiveServer, session_id: str
    ) -> None:
        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(70):
                yield b"x" * 1024

        response = await client.post(
            f"/threads/{session_id}/messages",
            content=chunks(),
            headers={**server.headers(NOAH), **JSON},
        )
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "payload_too_large"

    async def test_a_chunked_body_under_the_limit_is_read(
        self, client: httpx.AsyncClient, server: LiveServer, session_id: str
    ) -> None:
        async def chunks() -> AsyncIterator[bytes]:
            yield b'{"checkpoint_id":'
            yield b' "nope"}'

        response = await client.post(
            f"/threads/{session_id}/rewind",
            content=chunks(),
            headers={**server.headers(NOAH), **JSON},
        )
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "checkpoint_not_found"


class TestRequestId:
    async def test_a_safe_request_id_is_echoed(self, client: httpx.AsyncClient) -> None:
        response = await client.get("/healthz", headers={"X-Request-Id": "abc.DEF_1-2"})
        assert response.headers["x-request-id"] == "abc.DEF_1-2"

    @pytest.mark.parametrize(
        "hostile",
        ["<script>alert(1)</script>", "a b", "x" * 65, "id;rm", "caf\u00e9", "a\tb"],
    )
    async def test_an_unsafe_request_id_is_replaced(
        self, client: httpx.AsyncClient, hostile: str
    ) -> None:
        response = await client.get("/healthz", headers=[("X-Request-Id", hostile.encode("utf-8"))])
        echoed = response.headers["x-request-id"]
        assert echoed != hostile
        assert len(echoed) == 32 and echoed.isalnum()


class TestAccessLog:
    def test_access_lines_show_the_path_but_not_the_query_string(self, database_url: str) -> None:
        # a configured model (never called here): the in-process demo model's own uvicorn
        # turns the access log off
        env = {
            "DATABASE_URL": database_url,
            "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
            "OPENAI_API_KEY": "unused",
        }
        with ServiceProcess(env) as service:
            secret = "eyJhbGciOiJIUzI1NiJ9.secret-in-a-query"
            httpx.get(f"{service.url}/help?q=refunds&access_token={secret}", timeout=10)
            httpx.get(f"{service.url}/threads?token={secret}", timeout=10)
            time.sleep(0.3)  # the access line is written after the response
            log = service.log_path.read_text()
        assert '"GET /help HTTP/1.1" 200' in log, log
        assert '"GET /threads HTTP/1.1" 401' in log, log
        assert secret not in log
        assert "refunds" not in log


# the scripted model stands in for the configured one
PROD: dict[str, Any] = {
    "app_env": "prod",
    "jwt_secret": "a-production-secret-of-more-than-32-characters",
    "allow_demo_model_in_prod": True,
}


@pytest.fixture(scope="module")
def other_server(
    database_url: str, scripted_model_session: ScriptedModelServer
) -> Iterator[Callable[..., AbstractContextManager[LiveServer]]]:
    """A server with settings of the test's own, for the settings that shape the app."""

    def start(**options: Any) -> AbstractContextManager[LiveServer]:
        settings = Settings(database_url=database_url, _env_file=None, **options)  # type: ignore[call-arg]
        return live_server(settings, scripted_model_session)

    yield start


class TestApiDocs:
    DOCS = ("/docs", "/redoc", "/openapi.json")

    async def test_docs_are_served_in_dev(self, client: httpx.AsyncClient) -> None:
        for path in self.DOCS:
            assert (await client.get(path)).status_code == 200, path

    async def test_docs_are_off_in_prod(
        self, other_server: Callable[..., AbstractContextManager[LiveServer]]
    ) -> None:
        with other_server(**PROD) as live:
            async with live.client() as c:
                for path in self.DOCS:
                    response = await c.get(path)
                    assert response.status_code == 404, path
                    assert response.json()["error"]["code"] == "not_found"

    async def test_a_setting_turns_docs_on_in_prod(
        self, other_server: Callable[..., AbstractContextManager[LiveServer]]
    ) -> None:
        with other_server(**PROD, api_docs_enabled=True) as live:
            async with live.client() as c:
                for path in self.DOCS:
                    assert (await c.get(path)).status_code == 200, path


class TestPageHeaders:
    @pytest.mark.parametrize("path", ["/", "/index.html", "/app.js", "/style.css"])
    async def test_the_chat_page_and_its_assets_carry_security_headers(
        self, client: httpx.AsyncClient, path: str
    ) -> None:
        response = await client.get(path)
        assert response.status_code == 200
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert response.headers["x-content-type-options"] == "nosniff"

    async def test_a_help_page_carries_the_same_headers_with_its_own_policy(
        self, client: httpx.AsyncClient, db: AsyncConnectionPool[Any]
    ) -> None:
        await sync_help_articles(db)
        response = await client.get("/help/returns")
        assert response.status_code == 200
        assert response.headers["content-security-policy"].startswith("default-src 'none'")
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert response.headers["x-content-type-options"] == "nosniff"


ORIGIN = "https://shop.example"
PREFLIGHT = {
    "Origin": ORIGIN,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type, last-event-id, x-api-key",
}


class TestCors:
    async def test_cors_is_off_by_default(self, client: httpx.AsyncClient) -> None:
        preflight = await client.options("/threads", headers=PREFLIGHT)
        assert "access-control-allow-origin" not in preflight.headers
        simple = await client.get("/healthz", headers={"Origin": ORIGIN})
        assert "access-control-allow-origin" not in simple.headers

    async def test_listed_origins_may_call_the_api(
        self,
        server: LiveServer,
        other_server: Callable[..., AbstractContextManager[LiveServer]],
    ) -> None:
        with other_server(cors_origins=[ORIGIN]) as live:
            async with live.client() as c:
                preflight = await c.options("/threads", headers=PREFLIGHT)
                assert preflight.status_code == 200, preflight.text
                assert preflight.headers["access-control-allow-origin"] == ORIGIN
                allowed = preflight.headers["access-control-allow-headers"].lower()
                for header in ("authorization", "x-api-key", "last-event-id", "content-type"):
                    assert header in allowed
                created = await c.post("/threads", headers={**live.headers(NOAH), "Origin": ORIGIN})
                assert created.status_code == 201
                assert created.headers["access-control-allow-origin"] == ORIGIN
                exposed = created.headers["access-control-expose-headers"].lower()
                assert "location" in exposed and "content-location" in exposed
                stranger = await c.options(
                    "/threads", headers={**PREFLIGHT, "Origin": "https://evil.example"}
                )
                assert "access-control-allow-origin" not in stranger.headers

    def test_origins_are_read_as_a_comma_separated_list(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("CORS_ORIGINS", "https://a.example, https://b.example")
        settings = Settings(_env_file=None)  # type: ignore[call-arg]
        assert settings.cors_origins == ["https://a.example", "https://b.example"]
        monkeypatch.setenv("CORS_ORIGINS", '["https://c.example"]')
        assert Settings(_env_file=None).cors_origins == ["https://c.example"]  # type: ignore[call-arg]
        monkeypatch.delenv("CORS_ORIGINS")
        assert Settings(_env_file=None).cors_origins == []  # type: ignore[call-arg]


class TestDemoModelInput:
    @pytest.mark.parametrize("text", ["0" * 8000, "1." * 4000, "a" * 8000])
    def test_a_long_run_of_digits_or_letters_is_read_in_linear_time(self, text: str) -> None:
        # found by the fuzzer: 8,000 digits held the demo model (and the process) for 8 s
        started = time.perf_counter()
        assert intent_of(text) is None and email_in(text) is None
        assert time.perf_counter() - started < 1.0
