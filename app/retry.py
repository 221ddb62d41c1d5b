"""Trying again, in one place: how long to wait after some failed tries, and a loop that
tries a call again while what it raised says another try may succeed.

The waits serve both kinds of retry here: those a row schedules (a webhook, a channel
message: the wait is written as the row's next attempt, so a restart keeps it) and those a
task sleeps through (the LISTEN connection). `retried` is for a call tried again at once
or after a sleep, in the same task (a read whose database connection died).
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

# 2**30 times the base is past any cap; the exponent stops there so a float never overflows.
_MAX_DOUBLINGS = 30


def backoff_s(
    failures: int, base_s: float, cap_s: float = math.inf, *, jitter: float = 0.0
) -> float:
    """Seconds before the next try after `failures` failed ones: base, 2 base, 4 base, ...,
    at most `cap_s`. With `jitter` (0 to 1) up to that fraction of it is taken off at
    random, so that callers that failed together do not all come back together."""
    wait = float(min(cap_s, base_s * 2 ** min(max(failures - 1, 0), _MAX_DOUBLINGS)))
    return wait * (1.0 - jitter * random.random()) if jitter else wait


def stepped_s(failures: int, steps: Sequence[float]) -> float:
    """Seconds before the next try after `failures` failed ones when the waits are listed:
    the first after one failure, and so on, the last repeated."""
    return steps[min(max(failures - 1, 0), len(steps) - 1)]


async def retried(
    attempt: Callable[[int], Awaitable[T]],
    *,
    tries: int,
    retryable: Callable[[BaseException], bool],
    wait_s: Callable[[int], float] = lambda failures: 0.0,
    on_retry: Callable[[BaseException], None] = lambda error: None,
) -> T:
    """`attempt(n)` for n = 1, 2, ... until it returns, raises what `retryable` refuses, or
    has been tried `tries` times (the last error is raised). Between tries, `wait_s(failures)`
    seconds; `on_retry` hears of each error that is tried again."""
    for n in range(1, tries + 1):
        try:
            return await attempt(n)
        except Exception as error:
            if n == tries or not retryable(error):
                raise
            on_retry(error)
        if (seconds := wait_s(n)) > 0:
            await asyncio.sleep(seconds)
    raise ValueError(f"tries must be at least 1, not {tries}")
