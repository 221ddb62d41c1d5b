"""Clear feedback: busy threads, dropped connections, model errors, expired sessions,
the demo banner, and a token handed over by an embedding site."""

from __future__ import annotations

import json

from playwright.async_api import BrowserContext, Locator, Page, Route, expect

from app.api.auth import issue_token
from app.config import Settings
from app.runs.executor import MODEL_UNAVAILABLE
from tests.browser.conftest import SARA, AppServer
from tests.browser.pages import ask, assistant_messages, send, sign_in, user_messages
from tests.fakellm import Reply, Script, ScriptedModelServer

MESSAGES = "**/threads/*/messages"


def notice(page: Page) -> Locator:
    return page.get_by_test_id("notice")


def sse(*events: tuple[str, dict[str, object]]) -> str:
    return "".join(f"event: {name}\r\ndata: {json.dumps(data)}\r\n\r\n" for name, data in events)


class TestRunFeedback:
    async def test_busy_thread_says_another_reply_is_in_progress(self, page: Page) -> None:
        async def busy(route: Route) -> None:
            await route.fulfill(
                status=409,
                json={"error": {"code": "thread_busy", "message": "another reply is running"}},
            )

        await page.route(MESSAGES, busy)
        await sign_in(page, SARA)
        await send(page, "are you there?")
        await expect(notice(page)).to_contain_text("Another reply is in progress")
        # The message was not taken: it is back in the composer, not in the conversation.
        await expect(user_messages(page)).to_have_count(0)
        await expect(page.get_by_test_id("composer-input")).to_have_value("are you there?")

    async def test_a_stream_that_ends_without_done_offers_retry(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        async def dropped(route: Route) -> None:
            body = sse(
                ("run", {"run_id": "r1", "thread_id": "t", "checkpoint_id": None}),
                ("token", {"text": "I was about to"}),
            )
            await route.fulfill(status=200, content_type="text/event-stream", body=body)

        await page.route(MESSAGES, dropped)
        await sign_in(page, SARA)
        await send(page, "hello?")
        await expect(assistant_messages(page)).to_have_text("I was about to")
        await expect(notice(page)).to_contain_text("connection was lost")
        await expect(page.get_by_test_id("send")).to_be_enabled()

        # Retry shows what the server has: here the message never arrived, so it comes back.
        await page.unroute(MESSAGES)
        await page.get_by_test_id("retry").click()
        await expect(notice(page)).to_have_count(0)
        await expect(assistant_messages(page)).to_have_count(0)
        await expect(page.get_by_test_id("composer-input")).to_have_value("hello?")
        model_server.use(Script([Reply.say("Yes, I am here.")]))
        await page.get_by_test_id("composer-input").press("Enter")
        await expect(assistant_messages(page)).to_have_text("Yes, I am here.")

    async def test_unreachable_server_offers_retry(self, page: Page) -> None:
        await sign_in(page, SARA)
        await page.route(MESSAGES, lambda route: route.abort("connectionrefused"))
        await send(page, "hello?")
        await expect(notice(page)).to_contain_text("Could not reach the server")
        await expect(page.get_by_test_id("retry")).to_be_visible()

    async def test_error_events_show_their_message_and_nothing_internal(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.fail(500)]))
        await sign_in(page, SARA)
        await ask(page, "hello?")
        await expect(notice(page)).to_have_text(MODEL_UNAVAILABLE)
        text = await page.get_by_test_id("message-list").inner_text()
        assert "Traceback" not in text and "fakellm" not in text and "500" not in text


class TestSessions:
    async def test_an_invalid_token_goes_back_to_sign_in(
        self, context: BrowserContext, app_server: AppServer, shop: object
    ) -> None:
        page = await context.new_page()
        await page.goto(app_server.url + "/")
        await page.evaluate("sessionStorage.setItem('cs-agent.token', 'not-a-token')")
        await page.reload()
        await expect(page.get_by_test_id("signin")).to_be_visible()
        await expect(page.get_by_test_id("signin-message")).to_contain_text("session has ended")
        await sign_in(page, SARA)

    async def test_reload_keeps_the_person_signed_in(self, page: Page) -> None:
        await sign_in(page, SARA)
        await page.reload()
        await expect(page.get_by_test_id("identity")).to_have_text("Signed in as Sara Doe")
        await page.get_by_test_id("sign-out").click()
        await page.reload()
        await expect(page.get_by_test_id("signin")).to_be_visible()


class TestEmbedding:
    async def test_without_demo_sign_in_a_token_comes_from_the_url_fragment(
        self,
        context: BrowserContext,
        app_server: AppServer,
        browser_settings: Settings,
        model_server: ScriptedModelServer,
        shop: object,
    ) -> None:
        page = await context.new_page()
        await page.route(
            "**/auth/demo/**",
            lambda route: route.fulfill(
                status=404, json={"error": {"code": "not_found", "message": "not found"}}
            ),
        )
        await page.goto(app_server.url + "/")
        await expect(page.get_by_test_id("signin-unavailable")).to_be_visible()

        token = issue_token(browser_settings.jwt_secret.get_secret_value(), SARA)
        embedded = await context.new_page()
        await embedded.route("**/auth/demo/**", lambda route: route.abort())
        await embedded.goto(app_server.url + f"/#token={token}")
        await expect(embedded.get_by_test_id("app")).to_be_visible()
        assert "token" not in embedded.url  # taken out of the address bar
        model_server.use(Script([Reply.say("Hello from the embedded chat.")]))
        await ask(embedded, "hi")
        await expect(assistant_messages(embedded)).to_have_text("Hello from the embedded chat.")

        # A token handed over later, by changing the fragment, is taken too.
        await page.evaluate(f"location.hash = 'token={token}'")
        await expect(page.get_by_test_id("app")).to_be_visible()
        await expect(page.get_by_test_id("thread-item")).to_have_count(1)

    async def test_a_token_set_by_the_embedding_page(
        self,
        context: BrowserContext,
        app_server: AppServer,
        browser_settings: Settings,
        shop: object,
    ) -> None:
        token = issue_token(
            browser_settings.jwt_secret.get_secret_value(), "guest-embedded", role="guest"
        )
        page = await context.new_page()
        await page.add_init_script(f"window.CS_AGENT_TOKEN = {json.dumps(token)};")
        await page.goto(app_server.url + "/")
        await expect(page.get_by_test_id("identity")).to_have_text("Signed in as a guest")


class TestDemoBanner:
    async def test_shown_only_for_the_demo_model(
        self, context: BrowserContext, app_server: AppServer, page: Page, shop: object
    ) -> None:
        await expect(page.get_by_test_id("signin")).to_be_visible()
        await expect(page.get_by_test_id("demo-banner")).to_be_hidden()  # a real model here

        demo = await context.new_page()
        await demo.route(
            "**/readyz", lambda route: route.fulfill(json={"status": "ok", "model": "demo"})
        )
        await demo.goto(app_server.url + "/")
        banner = demo.get_by_test_id("demo-banner")
        await expect(banner).to_have_text(
            "Demo model: connect a real one with OPENAI_API_KEY (OpenAI) or OPENAI_BASE_URL"
        )
