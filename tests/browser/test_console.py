"""The staff console on its own: sign-in with a pasted token, a stale console's conflict, and
the chat page's thread stream picking up where it dropped."""

from __future__ import annotations

import json
from typing import Any

from playwright.async_api import BrowserContext, Page, Route, expect
from psycopg_pool import AsyncConnectionPool

from app.api.auth import issue_token
from tests.browser.conftest import SARA, AppServer
from tests.browser.console_pages import PageErrors, open_console, open_queued, transcript
from tests.browser.pages import ask, assistant_messages, current_thread_id, send, sign_in
from tests.fakellm import Reply, Script, ScriptedModelServer

SUMMARY = "Sara asks for a person about a lost parcel"


def staff_token(server: AppServer, user: str, name: str) -> str:
    secret = server.settings.jwt_secret.get_secret_value()
    return issue_token(secret, user, role="staff", name=name)


async def hand_off_by_api(server: AppServer, model: ScriptedModelServer, session: str) -> str:
    """Sara's conversation, handed off (a handoff asks no approval), as the thread's full id."""
    model.use(
        Script([Reply.call("transfer_to_human_agents", summary=SUMMARY), Reply.say("Transferred.")])
    )
    headers = server.headers(SARA)
    async with server.client() as client:
        asked = await client.post(
            f"/threads/{session}/messages", json={"content": "a person please"}, headers=headers
        )
        assert asked.json()["status"] == "completed", asked.text
    return f"{SARA}:{session}"


class TestSignIn:
    async def test_the_console_takes_a_staff_token_and_refuses_a_customer_one(
        self, staff_context: BrowserContext, app_server: AppServer
    ) -> None:
        errors = PageErrors()
        console = errors.watch(await staff_context.new_page(), "console")
        response = await console.goto(app_server.url + "/console")
        assert response is not None and response.ok
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]

        await console.get_by_test_id("token-input").fill(app_server.token(SARA))
        await console.get_by_test_id("token-signin").click()
        await expect(console.get_by_test_id("signin-message")).to_have_text(
            "That is not a staff token."
        )
        await console.get_by_test_id("token-input").fill(
            staff_token(app_server, "staff-bob", "Bob")
        )
        await console.get_by_test_id("token-signin").click()
        await expect(console.get_by_test_id("identity")).to_have_text("Signed in as Bob")
        await expect(console.get_by_test_id("tab-queued")).to_have_attribute(
            "aria-selected", "true"
        )
        # A reload keeps the session; signing out forgets it.
        await console.reload()
        await expect(console.get_by_test_id("identity")).to_have_text("Signed in as Bob")
        await console.get_by_test_id("sign-out").click()
        await expect(console.get_by_test_id("console-signin")).to_be_visible()
        assert not errors.seen, errors.seen


class TestConflict:
    async def test_a_stale_console_is_told_and_shows_who_holds_the_conversation(
        self,
        staff_context: BrowserContext,
        app_server: AppServer,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        thread = await hand_off_by_api(app_server, model_server, "console-conflict")
        errors = PageErrors()
        console = await open_console(staff_context, app_server, errors)
        # No live updates for this console: it goes on showing the thread as queued.
        await console.route("**/events", lambda route: route.abort())
        await open_queued(console, SUMMARY)
        await expect(console.get_by_test_id("accept")).to_be_visible()

        bob = {"Authorization": f"Bearer {staff_token(app_server, 'staff-bob', 'Bob')}"}
        async with app_server.client() as client:
            detail = await client.get(f"/staff/threads/{thread}", headers=bob)
            version = detail.json()["control"]["version"]
            accepted = await client.post(
                f"/staff/threads/{thread}/control",
                json={"action": "accept", "version": version},
                headers=bob,
            )
            assert accepted.status_code == 200, accepted.text

        await console.get_by_test_id("accept").click()
        await expect(console.get_by_test_id("console-status")).to_have_text(
            "Someone else changed this conversation; reloaded."
        )
        await expect(console.get_by_test_id("control-state")).to_have_text("Held by Bob")
        await expect(console.get_by_test_id("accept")).to_be_hidden()
        await expect(console.get_by_test_id("reply-form")).to_be_hidden()
        # (The aborted /events requests show as failed loads in the console; nothing else.)
        assert [e for e in errors.seen if "Failed to load resource" not in e] == []


def staff_event(event_id: int, text: str) -> str:
    data = {"id": f"m-{event_id}", "author": "staff", "name": "Alice", "content": text}
    return f"id: {event_id}\nevent: message\ndata: {json.dumps(data)}\n\n"


class TestThreadStream:
    async def test_the_chat_page_reconnects_with_the_last_event_id(
        self, page: Page, model_server: ScriptedModelServer, shop: AsyncConnectionPool[Any]
    ) -> None:
        asked_after: list[str | None] = []

        async def events(route: Route) -> None:
            asked_after.append(await route.request.header_value("last-event-id"))
            if len(asked_after) == 1:  # a stream that breaks after one event
                body = staff_event(7, "Hello, Alice here.")
            elif len(asked_after) == 2:
                body = staff_event(8, "Still with you.")
            else:
                await route.abort()
                return
            await route.fulfill(
                status=200, headers={"Content-Type": "text/event-stream"}, body=body
            )

        await page.route("**/threads/*/events", events)
        model_server.use(Script([Reply.say("Hello Sara.")]))
        await sign_in(page, SARA)
        await ask(page, "hi")
        staff = page.get_by_test_id("message-staff")
        await expect(staff).to_have_count(2)
        await expect(staff.get_by_test_id("message-text")).to_have_text(
            ["Hello, Alice here.", "Still with you."]
        )
        await expect(page.get_by_test_id("control-line")).to_have_text(
            ["Alice joined the conversation"]
        )
        assert asked_after[:2] == ["0", "7"]


class TestTakeOver:
    async def test_a_supervisor_takes_over_a_conversation_the_assistant_is_answering(
        self,
        page: Page,
        staff_context: BrowserContext,
        app_server: AppServer,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        model_server.use(Script([Reply.say("Hello Sara, how can I help?")]))
        await sign_in(page, SARA)
        await ask(page, "hi")
        thread = f"{SARA}:{await current_thread_id(page)}"
        errors = PageErrors()
        console = await open_console(staff_context, app_server, errors)

        await console.get_by_test_id("open-id").fill(f"{SARA}:no-such-thread")
        await console.get_by_test_id("open-thread").click()
        await expect(console.get_by_test_id("console-status")).to_be_visible()
        await expect(console.get_by_test_id("conversation")).to_be_hidden()

        await console.get_by_test_id("open-id").fill(thread)
        await console.get_by_test_id("open-thread").click()
        await expect(console.get_by_test_id("control-state")).to_have_text("With the assistant")
        await expect(console.get_by_test_id("accept")).to_be_hidden()
        await console.get_by_test_id("take-over").click()
        await expect(console.get_by_test_id("control-state")).to_have_text("Held by Alice")
        await expect(page.get_by_test_id("control-line")).to_have_text(
            ["Alice joined the conversation"]
        )

        model_server.use(Script([Reply.say("the assistant must not answer now")]))
        await console.get_by_test_id("reply-input").fill("Alice from the team here.")
        await console.get_by_test_id("reply-send").click()
        await expect(page.get_by_test_id("message-staff")).to_have_text(
            ["AliceAlice from the team here."]
        )
        await send(page, "Oh, hello Alice.")
        await expect(
            transcript(console, "transcript-customer").filter(has_text="Oh, hello Alice.")
        ).to_have_count(1)
        assert model_server.requests == []
        await expect(assistant_messages(page)).to_have_count(1)
        await expect(console.get_by_test_id("queue-item")).to_have_count(0)  # none queued
        await console.get_by_test_id("tab-mine").click()
        await expect(console.get_by_test_id("queue-item")).to_have_count(1)
        # The 404 of the made-up thread is the only failed load.
        assert [e for e in errors.seen if "404" not in e] == []
