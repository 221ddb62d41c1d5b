"""Loading the shipped help articles, and full-text search over them, on real Postgres."""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from app.help.articles import HelpArticle, shipped_articles
from app.help.repository import get_article, sync_help_articles
from app.help.search import MAX_SNIPPET_CHARS, search_help
from tests import factories as f


@pytest.fixture
async def help_db(db: AsyncConnectionPool[Any]) -> AsyncConnectionPool[Any]:
    await sync_help_articles(db)
    return db


async def ids(pool: AsyncConnectionPool[Any], query: str, n: int = 5) -> list[str]:
    return [hit.id for hit in await search_help(pool, query, n)]


class TestSync:
    async def test_loads_every_shipped_article(self, db: AsyncConnectionPool[Any]) -> None:
        summary = await sync_help_articles(db)
        shipped = shipped_articles()
        assert (summary.written, summary.removed, summary.total) == (len(shipped), 0, len(shipped))
        assert await get_article(db, "refund-timing") == next(
            a for a in shipped if a.id == "refund-timing"
        )

    async def test_a_second_sync_writes_nothing(self, help_db: AsyncConnectionPool[Any]) -> None:
        summary = await sync_help_articles(help_db)
        assert (summary.written, summary.removed) == (0, 0)

    async def test_changed_articles_are_rewritten_and_unshipped_ones_removed(
        self, help_db: AsyncConnectionPool[Any]
    ) -> None:
        first, second, *_ = shipped_articles()
        edited = replace(first, body="New body about parcels.", updated=date(2026, 11, 20))
        summary = await sync_help_articles(help_db, [edited, second])
        assert (summary.written, summary.removed) == (1, len(shipped_articles()) - 2)
        assert await get_article(help_db, first.id) == edited
        assert await ids(help_db, "parcels") == [first.id]

    async def test_unknown_and_malformed_ids_are_not_found(
        self, help_db: AsyncConnectionPool[Any]
    ) -> None:
        assert await get_article(help_db, "no-such-article") is None
        assert await get_article(help_db, "'; DROP TABLE help_articles; --") is None
        assert await get_article(help_db, "refund-timing") is not None


class TestRanking:
    @pytest.mark.parametrize(
        ("query", "first"),
        [
            ("how long do refunds take", "refund-timing"),
            ("When will I get my PayPal refund?", "refund-timing"),
            ("cancel my order", "cancel-order"),
            ("can I cancel after it shipped", "cancel-order"),
            ("return policy", "returns"),
            ("wrong size exchange", "exchanges"),
            ("how much does shipping cost", "shipping-costs"),
            ("shipping cost per kilometre", "shipping-costs"),
            ("how long does delivery take", "shipping-times"),
            ("where is my parcel tracking number", "shipping-times"),
            ("my item arrived broken damaged", "damaged-items"),
            ("missing item from my package", "damaged-items"),
            ("swap size before it ships", "change-order-items"),
            ("change payment method of my order", "change-payment-method"),
            ("which cards do you accept", "payment-methods"),
            ("update my home address", "change-account-address"),
            ("gift card balance", "gift-cards"),
            ("talk to a human", "contact-human"),
            ("delete my data", "privacy"),
            ("what does processed mean", "order-statuses"),
            ("verify identity", "identity-verification"),
        ],
    )
    async def test_best_article_first(
        self, help_db: AsyncConnectionPool[Any], query: str, first: str
    ) -> None:
        assert (await ids(help_db, query))[0] == first

    async def test_exchange_a_gift_finds_the_exchange_and_gift_articles(
        self, help_db: AsyncConnectionPool[Any]
    ) -> None:
        found = await ids(help_db, "can I exchange a gift", 3)
        assert {"gift-returns", "exchanges"} & set(found[:2])
        assert {"gift-returns", "exchanges", "gift-cards"} <= set(found)

    async def test_change_address_finds_the_address_articles(
        self, help_db: AsyncConnectionPool[Any]
    ) -> None:
        found = await ids(help_db, "change address")
        assert set(found[:2]) == {"change-order-address", "change-account-address"}

    async def test_a_word_no_article_holds_does_not_hide_the_others(
        self, help_db: AsyncConnectionPool[Any]
    ) -> None:
        found = await ids(help_db, "refund timing xylophone", 10)
        assert found[0] == "refund-timing"
        assert len(found) > 3  # every article holding some of the words

    async def test_max_results_caps_the_list(self, help_db: AsyncConnectionPool[Any]) -> None:
        assert len(await ids(help_db, "order", 2)) == 2
        assert len(await ids(help_db, "order", 50)) == 10


class TestFallbacks:
    async def test_partial_words_match_as_prefixes(self, help_db: AsyncConnectionPool[Any]) -> None:
        assert (await ids(help_db, "refun timin"))[0] == "refund-timing"

    async def test_numbers_and_codes_match(self, help_db: AsyncConnectionPool[Any]) -> None:
        assert await ids(help_db, "CNY") == ["shipping-costs"]
        assert (await ids(help_db, "20,000 km"))[0] == "shipping-costs"

    @pytest.mark.parametrize("query", ["", "   ", "how do I", "xyzzyq", "!!! & | ' ( ) :*"])
    async def test_nothing_to_match_is_an_empty_list(
        self, help_db: AsyncConnectionPool[Any], query: str
    ) -> None:
        assert await search_help(help_db, query) == []

    async def test_search_query_syntax_is_not_interpreted(
        self, help_db: AsyncConnectionPool[Any]
    ) -> None:
        assert (await ids(help_db, "refund & !gift | <-> 'card':*"))[0] in {
            "refund-timing",
            "gift-cards",
        }


class TestSnippets:
    @pytest.mark.parametrize(
        "query", ["how long do refunds take", "gift card", "order", "refun", "shipping"]
    )
    async def test_snippets_are_one_line_of_at_most_300_characters(
        self, help_db: AsyncConnectionPool[Any], query: str
    ) -> None:
        hits = await search_help(help_db, query, 10)
        assert hits
        for hit in hits:
            assert 0 < len(hit.snippet) <= MAX_SNIPPET_CHARS
            assert "\n" not in hit.snippet

    async def test_snippet_comes_from_around_the_match(
        self, help_db: AsyncConnectionPool[Any]
    ) -> None:
        long_body = (
            "Filler words here. " * 100
            + "The zeppelin delivery is special. "
            + ("More filler. " * 100)
        )
        await sync_help_articles(
            help_db, [HelpArticle("long-one", "Long", long_body, date(2026, 11, 2))]
        )
        [hit] = await search_help(help_db, "zeppelin")
        assert "zeppelin delivery" in hit.snippet
        assert len(hit.snippet) <= MAX_SNIPPET_CHARS

    async def test_rows_read_with_any_row_factory(self, help_db: AsyncConnectionPool[Any]) -> None:
        # The repository sets its own row factory; the shop helpers' default does not matter.
        assert (await f.rows(help_db, "SELECT count(*) AS n FROM help_articles"))[0]["n"] >= 15
