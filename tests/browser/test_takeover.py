"""Human takeover across two browsers: a customer's chat page and a staff console.

The assistant hands off (the customer asked; a handoff asks no approval), a person accepts
it in the console, they talk live both ways, the person hands back with a note, and the
assistant's next answer is written with that note in its context.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.async_api import BrowserContext, Page, expect
from psycopg_pool import AsyncConnectionPool

from tests.browser.conftest import SARA, AppServer
from tests.browser.console_pages import PageErrors, open_console, open_queued, transcript
from tests.browser.pages import assistant_messages, send, sign_in, wait_until_idle
from tests.fakellm import Reply, Script, ScriptedModelServer

SUMMARY = "Sara wants a person to look at a refund for order #W0000002"
NOTE = "Refund of 20 EUR approved for #W0000002; nothing else to do"
TRANSFERRED = "I have transferred you to a colleague, who will join here."


async def hand_off(page: Page, model_server: ScriptedModelServer) -> None:
    model_server.use(
        Script([Reply.call("transfer_to_human_agents", summary=SUMMARY), Reply.say(TRANSFERRED)])
    )
    await sign_in(page, SARA)
    await send(page, "I want to talk to a person about my refund.")  # nothing to approve
    await expect(assistant_messages(page).last).to_have_text(TRANSFERRED)
    await wait_until_idle(page)
    # The customer sees that a person will come, not the assistant's summary for them.
    await expect(page.get_by_test_id("confirm-card")).to_have_count(0)
    await expect(page.get_by_test_id("tool-summary")).to_have_text(
        "Done · Handed over to a human agent"
    )
    assert SUMMARY not in await page.locator("body").inner_text()


class TestTakeover:
    async def test_a_person_answers_live_and_hands_back_with_a_note_the_assistant_reads(
        self,
        page: Page,
        staff_context: BrowserContext,
        app_server: AppServer,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
        output_dir: Path,
    ) -> None:
        errors = PageErrors()
        errors.watch(page, "customer")
        await hand_off(page, model_server)

        console = await open_console(staff_context, app_server, errors)
        await open_queued(console, SUMMARY)
        await expect(console.get_by_test_id("control-state")).to_have_text("Waiting for a person")
        tool = transcript(console, "transcript-tool-call")
        await expect(tool).to_have_attribute("data-tool-name", "transfer_to_human_agents")
        await expect(transcript(console, "transcript-agent").last).to_have_text(
            f"Assistant{TRANSFERRED}"
        )

        await console.get_by_test_id("accept").click()
        await expect(console.get_by_test_id("control-state")).to_have_text("Held by Alice")
        joined = page.get_by_test_id("control-line").filter(has_text="joined")
        await expect(joined).to_have_text("Alice joined the conversation")

        model_server.use(Script([Reply.say("the assistant must not answer while Alice holds it")]))
        for n in range(1, 4):
            said = f"Hello Sara, this is Alice ({n})."
            await console.get_by_test_id("reply-input").fill(said)
            await console.get_by_test_id("reply-input").press("Enter")
            staff_said = page.get_by_test_id("message-staff").nth(n - 1)
            await expect(staff_said.get_by_test_id("message-text")).to_have_text(said)
            await expect(staff_said.get_by_test_id("message-author")).to_have_text("Alice")

            asked = f"Thanks Alice, question {n}."
            await send(page, asked)
            mine = page.get_by_test_id("message-user").filter(has_text=asked)
            await expect(mine).to_have_attribute("data-status", "sent")
            await wait_until_idle(page)
            await expect(
                transcript(console, "transcript-customer").filter(has_text=asked)
            ).to_have_count(1)
        assert model_server.requests == []  # nobody asked the model while Alice held it
        await expect(transcript(console, "transcript-staff")).to_have_count(3)
        await expect(assistant_messages(page)).to_have_count(1)  # the transfer message only
        await page.screenshot(path=str(output_dir / "takeover-customer.png"), full_page=True)
        await console.screenshot(path=str(output_dir / "takeover-console.png"), full_page=True)

        await console.get_by_test_id("release-note").fill(NOTE)
        await console.get_by_test_id("release").click()
        await expect(console.get_by_test_id("control-state")).to_have_text("With the assistant")
        await expect(page.get_by_test_id("control-line").last).to_have_text(
            "You are back with the assistant"
        )
        await expect(transcript(console, "transcript-note")).to_contain_text(NOTE)
        history = console.get_by_test_id("history-item")
        await expect(history).to_have_count(3)
        assert [await h.get_attribute("data-action") for h in await history.all()] == [
            "handoff",
            "accept",
            "release",
        ]
        # Named as the customer saw them ("Alice joined"); the id is on hover.
        texts = await history.all_text_contents()
        assert texts[0].startswith("handed off by the assistant, "), texts
        assert texts[1].startswith("accepted by Alice, "), texts
        assert texts[2].startswith("handed back to the assistant by Alice, "), texts
        assert NOTE in texts[2] and "staff-alice" not in " ".join(texts)
        await expect(history.nth(1).locator("[title]")).to_have_attribute("title", "staff-alice")

        model_server.use(Script([Reply.say("Your refund of 20 EUR is on its way.")]))
        await send(page, "Is there anything else I need to do?")
        await expect(assistant_messages(page).last).to_have_text(
            "Your refund of 20 EUR is on its way."
        )
        await wait_until_idle(page)
        (request,) = model_server.requests
        seen = " ".join(str(m.get("content")) for m in request.messages)
        assert NOTE in seen and "Hello Sara, this is Alice (3)." in seen
        # The reloaded conversation still tells the story, the note kept from the customer.
        await expect(page.get_by_test_id("message-staff")).to_have_count(3)
        await expect(page.get_by_test_id("control-line")).to_have_text(
            ["Alice joined the conversation", "You are back with the assistant"]
        )
        await expect(page.get_by_text(NOTE)).to_have_count(0)
        assert not errors.seen, errors.seen
