"""What a person does on the chat page, as helpers the browser tests share."""

from __future__ import annotations

from typing import Any

from playwright.async_api import Locator, Page, expect

# GET a path with the page's own token, as the page itself would; [status, JSON body or None].
API_GET = """
async (path) => {
  const token = sessionStorage.getItem("cs-agent.token");
  const response = await fetch(path, { headers: { Authorization: `Bearer ${token}` } });
  const text = await response.text();
  let body = null;
  try { body = JSON.parse(text); } catch { /* not JSON */ }
  return [response.status, body];
}
"""


async def sign_in(page: Page, user_id: str | None) -> None:
    """Demo sign-in as a customer (or as a guest when user_id is None)."""
    if user_id is None:
        await page.get_by_test_id("signin-guest").click()
    else:
        await page.locator(f'[data-testid="signin-customer"][data-user-id="{user_id}"]').click()
    await expect(page.get_by_test_id("app")).to_be_visible()
    # Enabled once the conversation to continue is on screen: keys typed before are lost.
    await expect(page.get_by_test_id("composer-input")).to_be_editable()


async def send(page: Page, text: str) -> None:
    box = page.get_by_test_id("composer-input")
    await box.fill(text)
    await box.press("Enter")


def assistant_messages(page: Page) -> Locator:
    return page.get_by_test_id("message-assistant")


def user_messages(page: Page) -> Locator:
    return page.get_by_test_id("message-user")


async def wait_until_idle(page: Page, timeout_ms: float = 5_000) -> None:
    """The reply has finished and the thread is shown as the server has it.

    The page marks the conversation aria-busy from the moment a message is sent;
    `timeout_ms` is how long the reply may still take.
    """
    await expect(page.get_by_test_id("message-list")).to_have_attribute(
        "aria-busy", "false", timeout=timeout_ms
    )
    await expect(page.get_by_test_id("typing")).to_be_hidden()
    await expect(page.get_by_test_id("send")).to_be_enabled()
    await expect(page.locator("[data-streaming]")).to_have_count(0)


async def ask(page: Page, text: str) -> None:
    """Send a message and wait for the whole reply."""
    await send(page, text)
    await wait_until_idle(page)


async def api_get(page: Page, path: str) -> tuple[int, Any]:
    """GET an API path as the signed-in person: (status, parsed JSON or None)."""
    status, body = await page.evaluate(API_GET, path)
    return int(status), body


async def current_thread_id(page: Page) -> str:
    """The id of the conversation on screen (the page keeps it for reloads)."""
    thread_id = await page.evaluate("sessionStorage.getItem('cs-agent.thread')")
    assert thread_id, "no conversation on screen"
    return str(thread_id)
