"""A guest proves who they are with the emailed code, on the page, with the built-in demo
model: the code prompt, the code in the dev banner (read from the outbox), a wrong code, the
right one, and then the change the guest asked for."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.async_api import Page, expect
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from tests import factories as f
from tests.browser.conftest import PENDING, AppServer
from tests.browser.pages import ask, assistant_messages, sign_in, wait_until_idle
from tests.integration.test_guest_identity import emailed_code

SARA_EMAIL = "sara.doe@example.com"


@pytest.fixture(scope="module")
def app_server(database_url: str) -> Iterator[AppServer]:
    """The demo model, as `cs-agent serve` runs with no model configured (dev)."""
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


async def enter_code(page: Page, code: str) -> None:
    prompt = page.get_by_test_id("code-prompt")
    await prompt.get_by_test_id("code-input").fill(code)
    await prompt.get_by_test_id("code-submit").click()
    await wait_until_idle(page)


class TestGuestCode:
    async def test_a_guest_verifies_with_the_emailed_code_then_cancels(
        self, page: Page, shop: AsyncConnectionPool[Any]
    ) -> None:
        await sign_in(page, None)
        await ask(page, f"Please cancel order {PENDING}, I ordered it by mistake")
        await expect(assistant_messages(page).last).to_contain_text("email address")
        await expect(page.get_by_test_id("code-prompt")).to_have_count(0)

        await ask(page, SARA_EMAIL)
        prompt = page.get_by_test_id("code-prompt")
        await expect(prompt).to_be_visible()
        await expect(page.get_by_test_id("code-input")).to_be_focused()
        banner_code = page.get_by_test_id("dev-code")
        await expect(banner_code).to_contain_text(f"the code emailed to {SARA_EMAIL} is ")
        shown = re.search(r"\d{6}", await banner_code.inner_text())
        code = await emailed_code(shop, SARA_EMAIL)
        assert shown is not None and shown.group(0) == code

        await prompt.get_by_test_id("code-input").fill("12")
        await prompt.get_by_test_id("code-submit").click()
        await expect(prompt.get_by_test_id("code-error")).to_have_text("The code has 6 digits.")

        await enter_code(page, f"{(int(code) + 1) % 1_000_000:06d}")
        await expect(assistant_messages(page).last).to_contain_text("isn't right")
        await expect(page.get_by_test_id("code-prompt")).to_be_visible()

        await enter_code(page, code)
        card = page.get_by_test_id("confirm-card")
        await expect(card.get_by_test_id("pending-summary")).to_contain_text(
            f"Cancel order {PENDING}"
        )
        await expect(page.get_by_test_id("code-prompt")).to_have_count(0)
        await expect(banner_code).to_be_hidden()
        await card.get_by_test_id("approve").click()
        await expect(assistant_messages(page).last).to_contain_text("cancelled")
        await wait_until_idle(page)
        (row,) = await f.rows(shop, "SELECT status FROM orders WHERE id = %s", PENDING)
        assert row["status"] == "cancelled"

    async def test_an_unknown_email_gets_the_same_prompt_and_no_code_is_sent(
        self, page: Page, shop: AsyncConnectionPool[Any]
    ) -> None:
        await sign_in(page, None)
        await ask(page, "list my orders")
        await ask(page, "nobody@example.com")
        await expect(assistant_messages(page).last).to_contain_text("6-digit code")
        await expect(page.get_by_test_id("code-prompt")).to_be_visible()
        await expect(page.get_by_test_id("dev-code")).to_be_hidden()
        assert await f.rows(shop, "SELECT * FROM outbox") == []
