"""The shipped help articles: well formed, the right size, and saying what the rules do."""

from __future__ import annotations

import re
from datetime import date
from decimal import Decimal

import pytest

from app.domain.pending_orders import CANCEL_REASONS
from app.domain.shipping import calc_shipping
from app.help.articles import HelpArticle, is_article_id, parse_article, shipped_articles

ARTICLES = {a.id: a for a in shipped_articles()}


def words(article: HelpArticle) -> int:
    return len(article.body.split())


class TestShippedArticles:
    def test_at_least_fifteen_articles_with_unique_titles(self) -> None:
        assert len(ARTICLES) >= 15
        assert len({a.title for a in ARTICLES.values()}) == len(ARTICLES)

    @pytest.mark.parametrize("article_id", sorted(ARTICLES))
    def test_each_article_is_80_to_300_words(self, article_id: str) -> None:
        assert 80 <= words(ARTICLES[article_id]) <= 300

    @pytest.mark.parametrize("article_id", sorted(ARTICLES))
    def test_each_article_has_a_slug_id_and_a_past_date(self, article_id: str) -> None:
        article = ARTICLES[article_id]
        assert is_article_id(article.id)
        assert date(2026, 1, 1) <= article.updated <= date.today()

    def test_the_topics_the_issue_asks_for_are_covered(self) -> None:
        assert {
            "refund-timing",
            "cancel-order",
            "returns",
            "exchanges",
            "gift-cards",
            "shipping-costs",
            "shipping-times",
            "change-order-address",
            "change-order-items",
            "change-payment-method",
            "damaged-items",
            "privacy",
            "contact-human",
            "order-statuses",
            "identity-verification",
        } <= set(ARTICLES)


class TestArticlesAgreeWithTheRules:
    def test_refund_timing_per_payment_method(self) -> None:
        body = ARTICLES["refund-timing"].body
        assert "- Gift card: immediate." in body
        assert "- Credit card: 5-7 business days" in body
        assert "- PayPal: 5-7 business days" in body

    def test_card_and_paypal_refunds_always_take_5_to_7_business_days(self) -> None:
        sentences = [s for a in ARTICLES.values() for s in re.split(r"(?<=[.:])\s+", a.body)]
        timed = [s for s in sentences if "business days" in s and re.search("card|PayPal", s)]
        assert len(timed) >= 5
        for sentence in timed:
            assert re.findall(r"(\d+-\d+) business days", sentence) == ["5-7"], sentence

    def test_cancellation_reasons_are_the_ones_the_tool_accepts(self) -> None:
        listed = re.findall(r"^- (.+)$", ARTICLES["cancel-order"].body, re.MULTILINE)
        assert set(CANCEL_REASONS) <= set(listed)

    def test_shipping_examples_match_the_shipping_rule(self) -> None:
        body = ARTICLES["shipping-costs"].body
        examples = re.findall(r"- ([\d.]+) km and ([\d.]+) kg: .* = ([\d.]+) CNY", body)
        assert len(examples) >= 3
        for km, kg, cost in examples:
            assert calc_shipping(Decimal(km), Decimal(kg)) == Decimal(cost)
        assert "5 CNY + 0.8 CNY per kilometre + 2 CNY per kilogram" in body

    def test_item_changes_are_described_as_once_only(self) -> None:
        assert "only once per order" in ARTICLES["change-order-items"].body
        assert "pending (item modified)" in ARTICLES["order-statuses"].body


class TestParseArticle:
    def test_reads_title_date_and_body(self) -> None:
        article = parse_article("a-b", "# Title\nupdated: 2026-11-02\n\nLine one\n\n- item\n")
        assert article == HelpArticle("a-b", "Title", "Line one\n\n- item", date(2026, 11, 2))

    @pytest.mark.parametrize(
        ("article_id", "text"),
        [
            ("Bad_Id", "# T\nupdated: 2026-11-02\n\nbody\n"),
            ("ok", "Title\nupdated: 2026-11-02\n\nbody\n"),
            ("ok", "# T\nupdated: yesterday\n\nbody\n"),
            ("ok", "# T\nupdated: 2026-11-02\nbody\n"),
            ("ok", "# T\nupdated: 2026-11-02\n\n"),
        ],
    )
    def test_malformed_files_are_refused(self, article_id: str, text: str) -> None:
        with pytest.raises(ValueError, match="help article"):
            parse_article(article_id, text)
