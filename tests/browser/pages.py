"""What a person does on the chat page, as helpers the browser tests share."""

from __future__ import annotations

from playwright.async_api import Locator, Page, expect


async def sign_in(page: Page, user_id: str | None) -> None:
    """Demo sign-in as a customer (or as a guest when user_id is None)."""
    if user_id is None:
        await page.get_by_test_id("signin-guest").click()
    else:
        await page.locator(f'[data-testid="signin-customer"][data-user-id="{user_id}"]').click()
    await expect(page.get_by_test_id("app")).to_be_visible()
    await expect(page.get_by_test_id("composer-input")).to_be_visible()


async def send(page: Page, text: str) -> None:
    box = page.get_by_test_id("composer-input")
    await box.fill(text)
    await box.press("Enter")


def assistant_messages(page: Page) -> Locator:
    return page.get_by_test_id("message-assistant")


def user_messages(page: Page) -> Locator:
    return page.get_by_test_id("message-user")


async def wait_until_idle(page: Page) -> None:
    """The reply has finished and the thread is shown as the server has it.

    The page marks the conversation aria-busy from the moment a message is sent.
    """
    await expect(page.get_by_test_id("message-list")).to_have_attribute("aria-busy", "false")
    await expect(page.get_by_test_id("typing")).to_be_hidden()
    await expect(page.get_by_test_id("send")).to_be_enabled()
    await expect(page.locator("[data-streaming]")).to_have_count(0)


async def ask(page: Page, text: str) -> None:
    """Send a message and wait for the whole reply."""
    await send(page, text)
    await wait_until_idle(page)
