"""The help-centre tools as the model calls them: compact JSON, or one-line observations."""

from __future__ import annotations

import json
from datetime import date
from typing import Any

import pytest
from langchain_core.tools import BaseTool
from psycopg_pool import AsyncConnectionPool

from app.help.articles import HelpArticle, shipped_articles
from app.help.repository import sync_help_articles
from app.help.search import MAX_SNIPPET_CHARS
from app.tools.help import MAX_BODY_CHARS
from app.tools.registry import build_tools
from tests import factories as f

LONG_BODY = "\n\n".join(f"Paragraph {n}: " + "parcel words " * 40 for n in range(8))


@pytest.fixture
async def tools(db: AsyncConnectionPool[Any]) -> dict[str, BaseTool]:
    long = HelpArticle("long-article", "A long article", LONG_BODY, date(2026, 11, 2))
    await sync_help_articles(db, [*shipped_articles(), long])
    return {t.name: t for t in build_tools(db).read}


async def text(tool: BaseTool, **args: Any) -> str:
    # A guest runtime with no verified customer: the help tools need no identity.
    return f.text_of(await f.invoke(tool, args, f.tool_runtime(role="guest")))


class TestSearchHelpCenter:
    async def test_results_are_ids_titles_and_snippets_best_first(
        self, tools: dict[str, BaseTool]
    ) -> None:
        result = json.loads(
            await text(tools["search_help_center"], query="how long do refunds take")
        )
        assert list(result) == ["results"]
        first = result["results"][0]
        assert list(first) == ["id", "title", "snippet"]
        assert (first["id"], first["title"]) == ("refund-timing", "How long do refunds take?")
        assert len(result["results"]) == 5
        assert all(len(r["snippet"]) <= MAX_SNIPPET_CHARS for r in result["results"])

    async def test_output_is_compact_json(self, tools: dict[str, BaseTool]) -> None:
        result = await text(tools["search_help_center"], query="gift card", max_results=1)
        assert result.startswith('{"results":[{"id":"gift-cards","title":')
        assert result == json.dumps(json.loads(result), separators=(",", ":"))

    async def test_max_results_limits_the_list(self, tools: dict[str, BaseTool]) -> None:
        result = await text(tools["search_help_center"], query="order", max_results=2)
        assert len(json.loads(result)["results"]) == 2

    async def test_nothing_matched_says_so_without_an_error(
        self, tools: dict[str, BaseTool]
    ) -> None:
        result = await text(tools["search_help_center"], query="xyzzyq")
        assert result == (
            "No help articles matched 'xyzzyq'. Try other or fewer words; if nothing covers "
            "the question, do not guess a policy."
        )

    async def test_blank_query_is_an_error(self, tools: dict[str, BaseTool]) -> None:
        result = await text(tools["search_help_center"], query="   ")
        assert result.startswith("Error: query must not be empty")

    @pytest.mark.parametrize("max_results", [0, 11])
    async def test_max_results_out_of_range_is_an_argument_error(
        self, tools: dict[str, BaseTool], max_results: int
    ) -> None:
        result = await text(tools["search_help_center"], query="refund", max_results=max_results)
        assert result.startswith("Error: invalid arguments (max_results:")

    def test_the_model_is_told_to_answer_only_from_articles_it_read(
        self, tools: dict[str, BaseTool]
    ) -> None:
        description = tools["search_help_center"].description
        assert "Answer policy questions only from articles you have read" in description
        assert set(tools["search_help_center"].args) == {"query", "max_results"}


class TestGetHelpArticle:
    async def test_returns_id_title_updated_and_body(self, tools: dict[str, BaseTool]) -> None:
        article = json.loads(await text(tools["get_help_article"], article_id="refund-timing"))
        assert list(article) == ["id", "title", "updated", "body"]
        assert article["updated"] == "2026-11-16"
        assert "- Gift card: immediate." in article["body"]

    async def test_a_long_body_is_cut_at_2000_characters_with_a_note(
        self, tools: dict[str, BaseTool]
    ) -> None:
        article = json.loads(await text(tools["get_help_article"], article_id="long-article"))
        assert len(LONG_BODY) > MAX_BODY_CHARS
        assert len(article["body"]) <= MAX_BODY_CHARS
        assert LONG_BODY.startswith(article["body"])
        assert article["note"] == (
            f"the body was cut at 2,000 of its {len(LONG_BODY):,} characters; "
            "the full article is at /help/long-article."
        )

    async def test_a_short_body_has_no_note(self, tools: dict[str, BaseTool]) -> None:
        article = json.loads(await text(tools["get_help_article"], article_id="returns"))
        assert "note" not in article

    @pytest.mark.parametrize("article_id", ["no-such-article", "Refund Timing", "x" * 500])
    async def test_unknown_id_points_to_the_search(
        self, tools: dict[str, BaseTool], article_id: str
    ) -> None:
        result = await text(tools["get_help_article"], article_id=article_id[:200])
        shown = article_id if len(article_id) <= 64 else article_id[:64] + "…"
        assert result == (
            f"Error: no help article with id '{shown}'; use search_help_center to find one."
        )

    def test_both_tools_are_read_tools(self, db: AsyncConnectionPool[Any]) -> None:
        toolset = build_tools(db)
        read = {t.name for t in toolset.read}
        assert {"search_help_center", "get_help_article"} <= read
        assert not {"search_help_center", "get_help_article"} & {t.name for t in toolset.write}
