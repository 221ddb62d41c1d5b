"""What we remember about a customer: the sidebar panel, kept current, and Forget."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph.store.postgres.aio import AsyncPostgresStore
from playwright.async_api import Page, expect
from psycopg_pool import AsyncConnectionPool

from app.memory.store import forget, list_preferences
from tests.browser.conftest import SARA
from tests.browser.pages import api_get, ask, current_thread_id, sign_in
from tests.fakellm import Reply, Script, ScriptedModelServer


@pytest.fixture
async def sara_remembers_nothing(shop: AsyncConnectionPool[Any]) -> AsyncIterator[None]:
    """The store is not among the tables emptied between tests: empty Sara's part of it."""
    store = AsyncPostgresStore(shop)

    async def forget_all() -> None:
        for preference in await list_preferences(store, SARA):
            await forget(store, SARA, preference.key)

    await forget_all()
    yield
    await forget_all()


@pytest.mark.usefixtures("sara_remembers_nothing")
class TestMemoryPanel:
    async def test_a_noted_preference_shows_after_the_answer_and_forget_removes_it(
        self, page: Page, model_server: ScriptedModelServer
    ) -> None:
        model_server.use(
            Script(
                [
                    Reply.call("remember_preference", key="refund_preference", value="gift card"),
                    Reply.say("Noted: refunds go to a gift card from now on."),
                ]
            )
        )
        await sign_in(page, SARA)
        panel = page.get_by_test_id("memory-panel")
        await expect(panel.get_by_test_id("memory-status")).to_have_text("Nothing yet.")

        await ask(page, "Please always refund me with a gift card.")
        items = panel.get_by_test_id("memory-item")
        await expect(items.get_by_test_id("memory-text")).to_have_text(
            ["refund_preference: gift card"]
        )
        # when, and in which conversation, it was noted
        session = await current_thread_id(page)
        await expect(items.get_by_test_id("memory-meta")).to_contain_text(
            f"in conversation {session}"
        )
        await expect(panel.get_by_test_id("memory-status")).to_be_empty()

        await items.get_by_role("button", name="Forget refund_preference").click()
        await expect(items).to_have_count(0)
        await expect(panel.get_by_test_id("memory-status")).to_have_text("Nothing yet.")
        assert await api_get(page, "/me/memory") == (200, [])

    async def test_guests_see_no_panel(self, page: Page) -> None:
        await sign_in(page, None)
        await expect(page.get_by_test_id("memory-panel")).to_be_hidden()
