"""The page with the built-in demo model instead of a scripted one: the app as
`cs-agent serve` runs it with no model configured."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.async_api import Page, expect
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from tests import factories as f
from tests.browser.conftest import PENDING, SARA, AppServer
from tests.browser.pages import ask, assistant_messages, sign_in, wait_until_idle


@pytest.fixture(scope="module")
def app_server(database_url: str) -> Iterator[AppServer]:
    """Overrides the scripted-model server for this module: `page` uses this one."""
    settings = Settings(
        database_url=database_url,
        app_env="dev",
        llm_provider="demo",
        demo_model_tokens_per_s=400,
        _env_file=None,
    )
    server = AppServer(settings, model=None).start()
    yield server
    server.stop()


class TestDemoModel:
    async def test_cancel_an_order_end_to_end(
        self, page: Page, shop: AsyncConnectionPool[Any]
    ) -> None:
        await expect(page.get_by_test_id("demo-banner")).to_have_text(
            "Demo model: connect a real one with OPENAI_API_KEY (OpenAI) or OPENAI_BASE_URL"
        )
        await sign_in(page, SARA)
        await ask(page, f"Please cancel order {PENDING}, I ordered it by mistake")
        card = page.get_by_test_id("confirm-card")
        await expect(card.get_by_test_id("pending-summary")).to_contain_text(
            f"Cancel order {PENDING}"
        )
        await expect(card.get_by_test_id("pending-summary")).to_contain_text(
            "credit card ending 9212"
        )
        await card.get_by_test_id("approve").click()
        await expect(assistant_messages(page).last).to_contain_text("cancelled")
        await wait_until_idle(page)
        # The refund goes where the card said, in words, never by the method's internal id.
        answer = await assistant_messages(page).last.inner_text()
        assert "goes back to your credit card" in answer and "credit_card_" not in answer
        (row,) = await f.rows(shop, "SELECT status FROM orders WHERE id = %s", PENDING)
        assert row["status"] == "cancelled"
