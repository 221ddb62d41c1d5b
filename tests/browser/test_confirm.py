"""A write waits for the customer's confirmation card; Approve runs it, Decline does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.async_api import Page, expect
from psycopg_pool import AsyncConnectionPool

from tests import factories as f
from tests.browser.conftest import PENDING, SARA
from tests.browser.pages import assistant_messages, send, sign_in, wait_until_idle
from tests.fakellm import Reply, Script, ScriptedModelServer


def cancel_script(after: str) -> Script:
    return Script(
        [
            Reply.call("cancel_pending_order", order_id=PENDING, reason="no longer needed"),
            Reply.say(after),
        ]
    )


async def order_status(pool: AsyncConnectionPool[Any], order_id: str) -> str:
    (row,) = await f.rows(pool, "SELECT status FROM orders WHERE id = %s", order_id)
    return str(row["status"])


async def ask_to_cancel(page: Page) -> None:
    await sign_in(page, SARA)
    await send(page, f"Please cancel order {PENDING}, I no longer need it.")
    card = page.get_by_test_id("confirm-card")
    await expect(card).to_be_visible()
    await expect(card.get_by_test_id("pending-summary")).to_contain_text(f"Cancel order {PENDING}")
    await expect(page.get_by_test_id("tool-activity")).to_have_attribute("data-status", "waiting")
    await wait_until_idle(page)


class TestConfirmation:
    async def test_approve_cancels_the_order_and_the_answer_continues(
        self,
        page: Page,
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
        output_dir: Path,
    ) -> None:
        model_server.use(cancel_script(f"Done: order {PENDING} is cancelled and refunded."))
        await ask_to_cancel(page)
        await page.screenshot(path=str(output_dir / "confirmation-card.png"), full_page=True)
        assert await order_status(shop, PENDING) == "pending"

        await page.get_by_test_id("approve").click()
        await expect(assistant_messages(page).last).to_have_text(
            f"Done: order {PENDING} is cancelled and refunded."
        )
        await wait_until_idle(page)
        tool = page.get_by_test_id("tool-activity")
        await expect(tool).to_have_attribute("data-status", "ok")
        await expect(tool.get_by_test_id("tool-summary")).to_contain_text(
            f"Order {PENDING}: cancelled"
        )
        assert await order_status(shop, PENDING) == "cancelled"
        # The card is gone once nothing waits any more, and the page stays usable.
        await expect(page.get_by_test_id("confirm-card")).to_have_count(0)
        await expect(page.get_by_test_id("composer-input")).to_be_editable()

    async def test_decline_changes_nothing(
        self, page: Page, model_server: ScriptedModelServer, shop: AsyncConnectionPool[Any]
    ) -> None:
        model_server.use(cancel_script("Alright, I left your order as it is."))
        await ask_to_cancel(page)
        before = await f.snapshot(shop)

        # By keyboard: the card takes the focus on Approve; Tab moves to Decline.
        await expect(page.get_by_test_id("approve")).to_be_focused()
        await page.keyboard.press("Tab")
        await expect(page.get_by_test_id("decline")).to_be_focused()
        await page.keyboard.press("Enter")
        await expect(assistant_messages(page).last).to_have_text(
            "Alright, I left your order as it is."
        )
        await wait_until_idle(page)
        tool = page.get_by_test_id("tool-activity")
        await expect(tool).to_have_attribute("data-status", "declined")
        assert await f.snapshot(shop) == before
        assert await order_status(shop, PENDING) == "pending"
        last_request = model_server.requests[-1]
        assert last_request.pending_tool_results()[0].content.startswith("Declined")

    async def test_a_pending_confirmation_survives_a_reload(
        self, page: Page, model_server: ScriptedModelServer, shop: AsyncConnectionPool[Any]
    ) -> None:
        model_server.use(cancel_script(f"Done: order {PENDING} is cancelled."))
        await ask_to_cancel(page)
        await page.reload()
        card = page.get_by_test_id("confirm-card")
        await expect(card.get_by_test_id("pending-summary")).to_contain_text(
            f"Cancel order {PENDING}"
        )
        await card.get_by_test_id("approve").click()
        await expect(assistant_messages(page).last).to_have_text(
            f"Done: order {PENDING} is cancelled."
        )
        assert await order_status(shop, PENDING) == "cancelled"
