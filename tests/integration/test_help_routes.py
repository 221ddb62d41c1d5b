"""The public help pages over a real uvicorn server: no token, escaped HTML, JSON errors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import date
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from app.help.articles import HelpArticle, shipped_articles
from app.help.repository import sync_help_articles
from tests.fakellm import ScriptedModelServer
from tests.integration.api_harness import LiveServer, live_server

HOSTILE = HelpArticle(
    "hostile-article",
    'Tips <img src=x onerror="alert(1)">',
    'Read this <script>alert("owned")</script> now.\n\n- <b>bold</b> & more',
    date(2026, 11, 2),
)


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    settings = Settings(database_url=database_url, _env_file=None)
    with live_server(settings, scripted_model_session) as live:
        yield live


@pytest.fixture
async def client(
    server: LiveServer, db: AsyncConnectionPool[Any]
) -> AsyncIterator[httpx.AsyncClient]:
    await sync_help_articles(db, [*shipped_articles(), HOSTILE])
    async with server.client() as c:
        yield c


class TestArticlePage:
    async def test_article_renders_as_html_without_a_token(self, client: httpx.AsyncClient) -> None:
        response = await client.get("/help/refund-timing")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/html")
        assert "<h1>How long do refunds take?</h1>" in response.text
        assert "<li>Gift card: immediate." in response.text

    async def test_page_forbids_scripts_and_sniffing(self, client: httpx.AsyncClient) -> None:
        response = await client.get("/help/returns")
        assert "default-src 'none'" in response.headers["content-security-policy"]
        assert response.headers["x-content-type-options"] == "nosniff"

    async def test_markup_in_an_article_renders_as_text(self, client: httpx.AsyncClient) -> None:
        response = await client.get("/help/hostile-article")
        assert response.status_code == 200
        page = response.text
        assert "<script" not in page and "<img" not in page and "<b>" not in page
        assert "&lt;script&gt;alert(&quot;owned&quot;)&lt;/script&gt;" in page
        assert "<li>&lt;b&gt;bold&lt;/b&gt; &amp; more</li>" in page
        assert "Tips &lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page

    @pytest.mark.parametrize("article_id", ["no-such-article", "REFUND-TIMING", "a%20b", "x" * 300])
    async def test_unknown_article_is_a_json_404(
        self, client: httpx.AsyncClient, article_id: str
    ) -> None:
        response = await client.get(f"/help/{article_id}")
        assert response.status_code == 404
        assert response.json() == {
            "error": {"code": "not_found", "message": "no help article with this id"}
        }


class TestSearchEndpoint:
    async def test_results_with_snippets_and_page_urls(self, client: httpx.AsyncClient) -> None:
        response = await client.get("/help", params={"q": "change address", "limit": 3})
        assert response.status_code == 200
        results = response.json()["results"]
        assert len(results) == 3
        assert {r["id"] for r in results[:2]} == {"change-order-address", "change-account-address"}
        assert all(r["url"] == f"/help/{r['id']}" for r in results)
        assert all(len(r["snippet"]) <= 300 for r in results)

    async def test_no_match_is_an_empty_list(self, client: httpx.AsyncClient) -> None:
        response = await client.get("/help", params={"q": "xyzzyq"})
        assert response.json() == {"results": []}

    @pytest.mark.parametrize("params", [{}, {"q": ""}, {"q": "x", "limit": 0}, {"q": "x" * 301}])
    async def test_bad_parameters_are_a_validation_error(
        self, client: httpx.AsyncClient, params: dict[str, Any]
    ) -> None:
        response = await client.get("/help", params=params)
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "validation_error"
