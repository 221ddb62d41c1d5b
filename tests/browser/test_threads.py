"""Editing a message and regenerating, switching threads, reloading, the debug drawer."""

from __future__ import annotations

from playwright.async_api import Locator, Page, Route, expect

from tests.browser.conftest import SARA
from tests.browser.pages import (
    api_get,
    ask,
    assistant_messages,
    current_thread_id,
    sign_in,
    user_messages,
    wait_until_idle,
)
from tests.fakellm import Reply, Script, ScriptedModelServer


def thread_items(page: Page) -> Locator:
    return page.get_by_test_id("thread-item")


class TestThreadList:
    async def test_a_thread_claims_no_message_count_that_holds_tool_steps(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(
            Script([Reply.call("get_order_details", order_id="#W0000001"), Reply.say("Pending.")])
        )
        await sign_in(page, SARA)
        await ask(page, "Where is #W0000001?")
        await wait_until_idle(page)
        await expect(thread_items(page)).to_have_count(1)
        # One exchange is four messages in the API's count (with the tool call and result).
        status, body = await api_get(page, "/threads")
        assert status == 200 and [t["message_count"] for t in body["items"]] == [4]
        await expect(thread_items(page)).not_to_contain_text("messages")


class TestEditAndRegenerate:
    async def test_editing_a_message_replaces_it_and_the_answer(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(
            Script(
                [
                    Reply.say("Paris is lovely in spring."),
                    Reply.say("Rome is lovely in autumn."),
                    Reply.say("Berlin is lovely all year."),
                ]
            )
        )
        await sign_in(page, SARA)
        await ask(page, "Tell me about Paris")
        await expect(assistant_messages(page)).to_have_text(["Paris is lovely in spring."])
        await ask(page, "And Rome?")
        await expect(assistant_messages(page)).to_have_count(2)

        first = user_messages(page).first
        await first.get_by_test_id("edit-message").click()
        editor = first.get_by_test_id("edit-input")
        await expect(editor).to_be_focused()
        await expect(editor).to_have_value("Tell me about Paris")
        await editor.fill("Tell me about Berlin")
        await first.get_by_test_id("edit-save").click()

        await expect(assistant_messages(page)).to_have_text(["Berlin is lovely all year."])
        await expect(user_messages(page).get_by_test_id("message-text")).to_have_text(
            ["Tell me about Berlin"]
        )
        await wait_until_idle(page)
        # The model saw the conversation from the edit on, without the old turns.
        assert model_server.requests[-1].user_texts() == ["Tell me about Berlin"]
        # Reloading shows the same, rewound conversation.
        await page.reload()
        await expect(assistant_messages(page)).to_have_text(["Berlin is lovely all year."])

    async def test_cancelling_an_edit_keeps_the_message(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("Hi!")]))
        await sign_in(page, SARA)
        await ask(page, "hello")
        message = user_messages(page).first
        await message.get_by_test_id("edit-message").click()
        await message.get_by_test_id("edit-input").fill("something else")
        await message.get_by_test_id("edit-input").press("Escape")
        await expect(message.get_by_test_id("message-text")).to_have_text("hello")
        await expect(message.get_by_test_id("edit-input")).to_have_count(0)
        assert len(model_server.requests) == 1


class TestThreads:
    async def test_switching_threads_and_reloading_shows_each_history(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(
            Script([Reply.say("About your shoes: they ship soon."), Reply.say("About your lamp.")])
        )
        await sign_in(page, SARA)
        await expect(page.get_by_test_id("empty-state")).to_be_visible()
        await ask(page, "my shoes")
        await expect(assistant_messages(page)).to_have_text(["About your shoes: they ship soon."])
        await expect(thread_items(page)).to_have_count(1)

        await page.get_by_test_id("new-thread").click()
        await expect(page.get_by_test_id("empty-state")).to_be_visible()
        await expect(page.get_by_test_id("thread-heading")).to_have_text("New conversation")
        await ask(page, "my lamp")
        await expect(assistant_messages(page)).to_have_text(["About your lamp."])
        # Newest activity first, titled by the first message.
        await expect(thread_items(page).get_by_test_id("thread-title")).to_have_text(
            ["my lamp", "my shoes"]
        )
        await expect(thread_items(page).first).to_have_attribute("aria-current", "true")

        await thread_items(page).filter(has_text="my shoes").click()
        await expect(assistant_messages(page)).to_have_text(["About your shoes: they ship soon."])
        await expect(user_messages(page).get_by_test_id("message-text")).to_have_text(["my shoes"])
        await expect(page.get_by_test_id("thread-heading")).to_have_text("my shoes")

        await page.reload()
        await expect(assistant_messages(page)).to_have_text(["About your shoes: they ship soon."])
        await expect(thread_items(page)).to_have_count(2)
        await thread_items(page).filter(has_text="my lamp").click()
        await expect(assistant_messages(page)).to_have_text(["About your lamp."])

    async def test_signing_out_and_in_as_someone_else_shows_only_their_threads(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("Hello Sara.")]))
        await sign_in(page, SARA)
        await ask(page, "hi")
        await page.get_by_test_id("sign-out").click()
        await expect(page.get_by_test_id("signin")).to_be_visible()
        await sign_in(page, None)
        await expect(page.get_by_test_id("identity")).to_have_text("Signed in as a guest")
        await expect(page.get_by_test_id("no-threads")).to_be_visible()
        await expect(page.get_by_test_id("empty-state")).to_be_visible()


class TestDeleteThread:
    async def test_deleting_after_confirming_removes_the_conversation_and_starts_afresh(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("Kept."), Reply.say("Soon gone.")]))
        await sign_in(page, SARA)
        delete = page.get_by_test_id("delete-thread")
        await expect(delete).to_be_hidden()  # nothing to delete yet
        await ask(page, "keep me")
        await page.get_by_test_id("new-thread").click()
        await ask(page, "delete me")
        doomed = await current_thread_id(page)
        await expect(thread_items(page)).to_have_count(2)

        # A confirm step first; the keyboard lands on Cancel, and Escape cancels too.
        await delete.click()
        confirm = page.get_by_test_id("delete-confirm")
        await expect(confirm).to_contain_text("Delete this conversation?")
        await expect(confirm.get_by_test_id("delete-cancel")).to_be_focused()
        await page.keyboard.press("Escape")
        await expect(confirm).to_be_hidden()
        await expect(delete).to_be_focused()
        assert (await api_get(page, f"/threads/{doomed}/state"))[0] == 200

        await delete.click()
        await confirm.get_by_test_id("delete-confirm-yes").click()
        await expect(page.get_by_test_id("empty-state")).to_be_visible()
        await expect(page.get_by_test_id("thread-heading")).to_have_text("New conversation")
        await expect(thread_items(page).get_by_test_id("thread-title")).to_have_text(["keep me"])
        await expect(delete).to_be_hidden()
        await expect(page.get_by_test_id("composer-input")).to_be_focused()
        assert (await api_get(page, f"/threads/{doomed}/state"))[0] == 404
        await page.reload()
        await expect(page.get_by_test_id("empty-state")).to_be_visible()
        await expect(thread_items(page)).to_have_count(1)


class TestDebugDrawer:
    async def test_shows_state_and_history_and_rewinds_to_a_checkpoint(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("First answer."), Reply.say("Second answer.")]))
        await sign_in(page, SARA)
        await ask(page, "one")
        await ask(page, "two")
        await expect(assistant_messages(page)).to_have_count(2)

        await page.get_by_test_id("toggle-debug").click()
        drawer = page.get_by_test_id("debug-drawer")
        await expect(drawer).to_be_visible()
        await expect(drawer.get_by_test_id("debug-state")).to_contain_text(
            '"content": "Second answer."'
        )
        checkpoints = drawer.get_by_test_id("checkpoint")
        await expect(checkpoints.first).to_be_visible()
        # The newest checkpoint that ends with the first answer: rewind there.
        target = checkpoints.filter(has_text="assistant: First answer.").first
        await target.get_by_test_id("rewind-checkpoint").click()
        await expect(assistant_messages(page)).to_have_text(["First answer."])
        await expect(drawer.get_by_test_id("debug-state")).not_to_contain_text("Second answer.")
        await page.keyboard.press("Escape")
        await expect(drawer).to_be_hidden()
        await expect(page.get_by_test_id("toggle-debug")).to_be_focused()

    async def test_a_summarised_conversation_shows_the_summary(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(Script([Reply.say("Hello.")]))
        await sign_in(page, SARA)
        await ask(page, "hi")
        await page.get_by_test_id("toggle-debug").click()
        drawer = page.get_by_test_id("debug-drawer")
        await expect(drawer.get_by_test_id("debug-state")).to_contain_text('"summary": null')
        await expect(drawer.get_by_test_id("debug-summary")).to_be_hidden()

        summary = "The customer asked about <b>refunds</b>."

        async def summarised(route: Route) -> None:
            response = await route.fetch()
            await route.fulfill(
                response=response, json={**await response.json(), "summary": summary}
            )

        await page.route("**/threads/*/state", summarised)
        await drawer.get_by_test_id("debug-refresh").click()
        note = drawer.get_by_test_id("debug-summary")
        await expect(note).to_contain_text("Earlier messages are summarised for the assistant")
        await expect(note.get_by_test_id("debug-summary-text")).to_have_text(summary)
