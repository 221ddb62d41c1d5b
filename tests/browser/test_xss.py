"""HTML in messages, tool results, product and customer names is shown as text, never run."""

from __future__ import annotations

import asyncio

from playwright.async_api import Page, expect

from tests.browser.conftest import EVE, EVE_ORDER, XSS
from tests.browser.pages import ask, assistant_messages, sign_in, user_messages
from tests.fakellm import Reply, Script, ScriptedModelServer

SCRIPT_TAG = "<script>window.__xss=1</script>"
ANSWER = (
    f"Your item is called {XSS}. In code: `{XSS}`. "
    "[Click me](javascript:window.__xss=1) or [the shop](https://example.com/shop).\n\n"
    f"```html\n{XSS}\n```"
)


async def assert_nothing_ran(page: Page) -> None:
    await asyncio.sleep(0.3)  # an <img onerror> would fire once its load fails
    assert await page.evaluate("typeof window.__xss") == "undefined"
    for tag in ("img", "script", "iframe"):
        assert await page.locator(f"#app {tag}, #signin {tag}").count() == 0, tag


class TestHtmlShowsAsText:
    async def test_customer_names_in_the_sign_in_list(self, page: Page) -> None:
        eve = page.locator(f'[data-testid="signin-customer"][data-user-id="{EVE}"]')
        await expect(eve).to_contain_text(f"<b>Eve</b> {XSS}")
        await assert_nothing_ran(page)

    async def test_assistant_answer_tool_result_and_user_message(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(
            Script([Reply.call("get_order_details", order_id=EVE_ORDER), Reply.say(ANSWER)])
        )
        await sign_in(page, EVE)
        await expect(page.get_by_test_id("identity")).to_contain_text(XSS)
        await ask(page, f"What is {XSS} in order {EVE_ORDER}?")

        await expect(user_messages(page).get_by_test_id("message-text")).to_have_text(
            f"What is {XSS} in order {EVE_ORDER}?"
        )
        answer = assistant_messages(page).get_by_test_id("message-text")
        await expect(answer).to_contain_text(f"Your item is called {XSS}.")
        await expect(answer.locator("code").first).to_have_text(XSS)
        await expect(answer.locator("pre code")).to_have_text(XSS)
        # Only the http(s) link is a link; the javascript: one stays text.
        links = answer.locator("a")
        await expect(links).to_have_count(1)
        await expect(links).to_have_attribute("href", "https://example.com/shop")
        await expect(links).to_have_attribute("rel", "noopener noreferrer nofollow")
        await expect(answer).to_contain_text("[Click me](javascript:window.__xss=1)")

        tool = page.get_by_test_id("tool-activity")
        await tool.get_by_test_id("tool-summary").click()
        await expect(tool.get_by_test_id("tool-content")).to_contain_text(SCRIPT_TAG)
        # Titles are the first message, cut at 60 characters by the server.
        title = 'What is <img src=x onerror="window.__xss=1"><script>'
        await expect(page.get_by_test_id("thread-item")).to_contain_text(title)
        await expect(page.get_by_test_id("thread-heading")).to_contain_text(title)

        await page.get_by_test_id("toggle-debug").click()
        await expect(page.get_by_test_id("debug-state")).to_contain_text(SCRIPT_TAG)
        await expect(page.get_by_test_id("checkpoint").first).to_contain_text(SCRIPT_TAG)
        await assert_nothing_ran(page)

    async def test_while_streaming(self, page: Page, model_server: ScriptedModelServer) -> None:
        # Half-written tags arrive token by token; no state in between may become markup.
        model_server.use(Script([Reply.say(f"a {XSS} b {SCRIPT_TAG} c")]))
        await sign_in(page, EVE)
        await ask(page, "hello")
        await expect(assistant_messages(page)).to_have_text(f"a {XSS} b {SCRIPT_TAG} c")
        await assert_nothing_ran(page)
