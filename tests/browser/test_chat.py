"""Signing in, streaming answers, tool activity, threads and history, in a real browser."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from playwright.async_api import Page, expect

from app.help.articles import shipped_articles
from tests.browser.conftest import PENDING, SARA
from tests.browser.pages import assistant_messages, send, sign_in, user_messages, wait_until_idle
from tests.fakellm import Latency, Reply, Script, ScriptedModelServer

SLOW = Latency(ttft_ms=50, tokens_per_s=25)
ANSWER = (
    "Your order **#W0000001** is *pending*: it has not shipped yet, so you can still change it. "
    "Is there anything else I can help with today?"
)
# The sources line that directly follows an answer.
ANSWER_SOURCES = '[data-testid="message-assistant"] + [data-testid="sources"]'


async def streamed_texts(page: Page, timeout_s: float = 15) -> list[str]:
    """Every distinct text of the streaming assistant message, polled until it finishes."""
    seen: list[str] = []
    streaming = page.locator('[data-testid="message-assistant"][data-streaming]')
    await expect(streaming).to_have_count(1)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        texts = await streaming.all_inner_texts()
        if not texts:
            break
        if texts[0] and (not seen or seen[-1] != texts[0]):
            seen.append(texts[0])
        await asyncio.sleep(0.03)
    return seen


class TestSignInAndStreaming:
    async def test_answer_streams_in_token_by_token_after_a_tool_line(
        self, page: Page, model_server: ScriptedModelServer, output_dir: Path
    ) -> None:
        model_server.use(
            Script([Reply.call("get_order_details", order_id=PENDING), Reply.say(ANSWER)]),
            latency=SLOW,
        )
        await sign_in(page, SARA)
        await expect(page.get_by_test_id("identity")).to_contain_text("Sara Doe")
        await send(page, f"Where is my order {PENDING}?")

        await expect(user_messages(page).get_by_test_id("message-text")).to_have_text(
            f"Where is my order {PENDING}?"
        )
        tool = page.get_by_test_id("tool-activity")
        await expect(tool.get_by_test_id("tool-label")).to_have_text(
            f"Looking up order {PENDING} …"
        )
        texts = await streamed_texts(page)
        final = "Your order #W0000001 is pending: it has not shipped yet"
        intermediate = [t for t in texts if final not in t or len(t) < len(ANSWER) - 20]
        assert len(set(intermediate)) >= 2, texts
        assert all(len(a) < len(b) for a, b in itertools.pairwise(texts)), texts

        await wait_until_idle(page)
        answer = assistant_messages(page).last
        await expect(answer).to_contain_text(final)
        await expect(answer.locator("strong")).to_have_text("#W0000001")
        await expect(answer.locator("em")).to_have_text("pending")
        await expect(tool).to_have_attribute("data-status", "ok")
        summary = tool.get_by_test_id("tool-summary")
        await expect(summary).to_contain_text("Done")
        await expect(tool.get_by_test_id("tool-content")).to_be_hidden()
        await summary.click()
        # what the model read: the tool's own text
        await expect(tool.get_by_test_id("tool-content")).to_contain_text(
            "Order #W0000001: pending, 3 items"
        )
        await page.screenshot(path=str(output_dir / "main-view.png"), full_page=True)

    async def test_shift_enter_adds_a_line_and_enter_sends(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("Noted.")]))
        await sign_in(page, None)
        box = page.get_by_test_id("composer-input")
        await box.type("line one")
        await box.press("Shift+Enter")
        await box.type("line two")
        await expect(box).to_have_value("line one\nline two")
        await expect(user_messages(page)).to_have_count(0)
        await box.press("Enter")
        await expect(user_messages(page).get_by_test_id("message-text")).to_have_text(
            "line one\nline two"
        )
        await expect(assistant_messages(page)).to_have_text("Noted.")
        await expect(box).to_have_value("")
        assert model_server.requests[-1].last_user_text() == "line one\nline two"


class TestToolSummaries:
    async def test_the_result_lines_name_no_internal_ids(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(
            Script(
                [
                    Reply.call("find_user_id_by_email", email="sara.doe@example.com"),
                    Reply.call("search_help_center", query="refunds"),
                    Reply.call("get_order_details", order_id=PENDING),
                    Reply.say("Found it."),
                ]
            )
        )
        await sign_in(page, SARA)
        await send(page, f"Is {PENDING} refundable?")
        await wait_until_idle(page)
        summaries = page.get_by_test_id("tool-summary")
        await expect(summaries).to_have_text(
            [
                "Done · Account found",
                "Done · Help centre searched",
                f"Done · Order {PENDING}: pending",
            ]
        )
        shown = " ".join(await summaries.all_inner_texts())
        for internal in (SARA, "credit_card_", "Result of", "fields"):
            assert internal not in shown
        # What the model read stays one click away.
        await summaries.first.click()
        await expect(page.get_by_test_id("tool-content").first).to_contain_text(SARA)


class TestSources:
    async def test_an_answer_from_a_help_article_links_to_the_article_page(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        (article,) = [a for a in shipped_articles() if a.id == "refund-timing"]
        model_server.use(
            Script(
                [
                    Reply.call("get_help_article", article_id=article.id),
                    Reply.say("Refunds to a card take 5-7 business days."),
                ]
            )
        )
        await sign_in(page, SARA)
        await send(page, "How long do refunds take?")
        await expect(page.get_by_test_id("tool-label")).to_have_text("Reading a help article …")
        await wait_until_idle(page)
        # Right under the answer it supports.
        answer = assistant_messages(page).last
        await expect(answer).to_have_text("Refunds to a card take 5-7 business days.")
        link = page.locator(ANSWER_SOURCES).get_by_test_id("source-link")
        await expect(link).to_have_text(article.title)
        await expect(link).to_have_attribute("href", f"/help/{article.id}")

        async with (
            page.context.expect_event("response", lambda r: "/help/" in r.url) as response_info,
            page.context.expect_page() as tab_info,
        ):
            await link.click()
        response = await response_info.value
        assert response.status == 200
        assert response.headers["content-type"].startswith("text/html")
        tab = await tab_info.value
        await expect(tab.get_by_role("heading", level=1)).to_have_text(article.title)

        # Sources stay with their answer when the thread is shown again.
        await page.reload()
        await expect(page.locator(ANSWER_SOURCES).get_by_test_id("source-link")).to_have_text(
            article.title
        )
