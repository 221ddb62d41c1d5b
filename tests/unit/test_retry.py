"""The one retry helper: its waits are the ones each retry path had before it (a webhook, a
channel message, the LISTEN connection), and its loop tries again only what may succeed."""

from __future__ import annotations

import time

import pytest

from app.db.listen import RETRY_S
from app.retry import backoff_s, retried, stepped_s


def test_the_backoff_doubles_from_the_base_up_to_the_cap() -> None:
    assert [backoff_s(n, 1.0, 30.0) for n in range(0, 8)] == [1, 1, 2, 4, 8, 16, 30, 30]
    assert backoff_s(10_000, 0.5, 60.0) == 60.0  # no overflow however many failures


def test_without_a_cap_a_channel_message_waits_two_to_the_power_of_its_tries() -> None:
    assert [backoff_s(n, 2.0) for n in range(1, 9)] == [2.0**n for n in range(1, 9)]


def test_jitter_takes_at_most_its_fraction_off_and_spreads_the_waits() -> None:
    waits = [backoff_s(4, 1.0, 30.0, jitter=0.25) for _ in range(200)]
    assert all(6.0 <= w <= 8.0 for w in waits)
    assert len(set(waits)) > 100


def test_listed_waits_go_in_order_and_the_last_repeats() -> None:
    assert [stepped_s(n, RETRY_S) for n in range(1, 7)] == [0.5, 1.0, 2.0, 5.0, 5.0, 5.0]


class Flaky(Exception):
    pass


async def test_a_retryable_error_is_tried_again_until_it_succeeds() -> None:
    seen: list[int] = []
    heard: list[BaseException] = []

    async def attempt(n: int) -> str:
        seen.append(n)
        if n < 3:
            raise Flaky
        return "ok"

    result = await retried(
        attempt, tries=5, retryable=lambda e: isinstance(e, Flaky), on_retry=heard.append
    )
    assert (result, seen, len(heard)) == ("ok", [1, 2, 3], 2)


async def test_the_last_error_is_raised_after_the_last_try() -> None:
    seen: list[int] = []

    async def attempt(n: int) -> None:
        seen.append(n)
        raise Flaky(n)

    with pytest.raises(Flaky) as raised:
        await retried(attempt, tries=3, retryable=lambda e: isinstance(e, Flaky))
    assert (seen, raised.value.args) == ([1, 2, 3], (3,))


async def test_an_error_that_is_not_retryable_is_raised_at_once() -> None:
    seen: list[int] = []

    async def attempt(n: int) -> None:
        seen.append(n)
        raise KeyError(n)

    with pytest.raises(KeyError):
        await retried(attempt, tries=3, retryable=lambda e: isinstance(e, Flaky))
    assert seen == [1]


async def test_it_waits_between_tries_as_the_schedule_says() -> None:
    waits: list[int] = []

    async def attempt(n: int) -> None:
        if n < 3:
            raise Flaky

    def wait_s(failures: int) -> float:
        waits.append(failures)
        return 0.05

    started = time.monotonic()
    await retried(attempt, tries=3, retryable=lambda e: isinstance(e, Flaky), wait_s=wait_s)
    assert waits == [1, 2]
    assert time.monotonic() - started >= 0.1
