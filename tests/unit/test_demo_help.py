"""The demo model answers policy questions from the help centre: search, read the best
article, answer from its body and name it; English and Chinese; nothing found."""

from __future__ import annotations

import pytest

from app.demo.answers import help_excerpt
from app.demo.parsing import help_query_of, intent_of
from app.help.articles import shipped_articles
from tests.unit.test_demo_policy import TOOLS, Chat, called

HELP_TOOLS = (*TOOLS, "search_help_center", "get_help_article")
REFUND_TIMING = next(a for a in shipped_articles() if a.id == "refund-timing")
ARTICLE = {
    "id": REFUND_TIMING.id,
    "title": REFUND_TIMING.title,
    "updated": "2026-11-16",
    "body": REFUND_TIMING.body,
}
HITS = {
    "results": [
        {"id": "refund-timing", "title": REFUND_TIMING.title, "snippet": "How long a refund…"},
        {"id": "returns", "title": "Returns", "snippet": "You can return items…"},
    ]
}


def chat() -> Chat:
    return Chat(tools=HELP_TOOLS)


class TestPolicyIntent:
    @pytest.mark.parametrize(
        "text",
        [
            "how long do refunds take?",
            "How long does a refund take",
            "can I exchange a gift?",
            "what is your return policy",
            "What's your refund policy for gift cards?",
            "how long does shipping take?",
            "退款多久",
            "退货政策是什么",
            "礼物可以换货吗",
        ],
    )
    def test_policy_questions(self, text: str) -> None:
        assert intent_of(text) == "policy"

    @pytest.mark.parametrize(
        ("text", "intent"),
        [
            ("return my order #W2611340", "return"),
            ("what is the return policy for #W2611340?", "return"),
            ("Can I return my order?", "return"),
            ("how do I cancel my order?", "cancel"),
            ("cancel #W2611340", "cancel"),
            ("我要退货", "return"),
            ("取消订单", "cancel"),
            ("how much is shipping for 2 kg over 300 km?", "shipping"),
            ("can you ship 2 kg 300 km?", "shipping"),
            ("where is my order #W2611340?", "status"),
        ],
    )
    def test_order_requests_keep_their_intents(self, text: str, intent: str) -> None:
        assert intent_of(text) == intent

    def test_the_search_query_is_the_question_or_english_topics_for_chinese(self) -> None:
        assert help_query_of("  how long do  refunds take? ") == "how long do refunds take?"
        assert help_query_of("退款多久") == "refund how long take"
        assert help_query_of("礼物可以换货吗") == "exchange gift"


class TestPolicyAnswers:
    def test_searches_reads_the_first_hit_then_answers_from_its_body(self) -> None:
        c = chat()
        assert called(c.ask("How long do refunds take?")) == (
            "search_help_center",
            {"query": "How long do refunds take?"},
        )
        assert called(c.result(HITS)) == ("get_help_article", {"article_id": "refund-timing"})
        text = c.result(ARTICLE).text
        assert text.startswith(f"From our help article '{REFUND_TIMING.title}':")
        assert "How long a refund takes depends on the payment method" in text
        assert "Gift card: immediate." in text

    def test_chinese_question_searches_in_english_and_answers_in_chinese(self) -> None:
        c = chat()
        assert called(c.ask("退款多久？")) == (
            "search_help_center",
            {"query": "refund how long take"},
        )
        assert called(c.result(HITS))[0] == "get_help_article"
        text = c.result(ARTICLE).text
        assert text.startswith(f"摘自我们的帮助文章《{REFUND_TIMING.title}》")
        assert "How long a refund takes" in text

    def test_nothing_found_says_so_and_offers_a_human(self) -> None:
        c = chat()
        assert called(c.ask("what is your policy on returning pets?"))[0] == "search_help_center"
        reply = c.result("No help articles matched 'pets'. Try other or fewer words.")
        assert not reply.tool_calls
        assert "no article on that" in reply.text and "human colleague" in reply.text

    def test_nothing_found_in_chinese(self) -> None:
        c = chat()
        assert called(c.ask("退款政策是什么"))[0] == "search_help_center"
        assert "帮助中心没有相关文章" in c.result("No help articles matched 'refund'.").text

    def test_a_missing_article_or_failed_search_is_relayed(self) -> None:
        c = chat()
        c.ask("can I exchange a gift?")
        assert "couldn't look that up" in c.result("Error: the help centre is down.").text
        c = chat()
        c.ask("can I exchange a gift?")
        c.result(HITS)
        assert (
            "couldn't look that up: no help article"
            in c.result("Error: no help article with id 'x'.").text
        )

    def test_without_the_help_tools_it_does_not_call_them(self) -> None:
        reply = Chat().ask("how long do refunds take?")
        assert not reply.tool_calls and "demo model" in reply.text

    def test_a_follow_up_is_a_new_question(self) -> None:
        c = chat()
        c.ask("how long do refunds take?")
        c.result(HITS)
        c.result(ARTICLE)
        assert not c.ask("thanks").tool_calls


class TestExcerpt:
    def test_first_line_then_the_lines_with_the_question_words(self) -> None:
        body = "Intro line. Second sentence. Third sentence.\n\n- apples are red\n- gifts go\n"
        assert help_excerpt(body, "gifts?") == "Intro line. Second sentence.\n- gifts go"

    def test_without_matching_words_the_first_lines(self) -> None:
        body = "One.\nTwo.\nThree.\nFour."
        assert help_excerpt(body, "zebra") == "One.\nTwo.\nThree."
        assert help_excerpt("", "zebra") == ""
