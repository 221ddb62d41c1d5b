"""How the number of turns a worker admits follows its event loop (app/runs/admission.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.background import Loop
from app.runs.admission import ADMIT_TICK_S, MIN_LIMIT, Admission, Overloaded


class Turns:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        return self.n


async def test_a_blocked_event_loop_cuts_the_limit_to_below_the_turns_in_flight() -> None:
    turns = Turns()
    admission = Admission(turns, max_turns=100, max_lag_ms=50)
    loop = Loop("admission", admission.tick, ADMIT_TICK_S, jitter=False)
    loop.start()
    try:
        await asyncio.sleep(0.25)
        assert admission.limit == 100  # on time: no cut
        turns.n = 40
        time.sleep(0.2)  # noqa: ASYNC251 (the worker's CPU is spoken for: every coroutine waits)
        await asyncio.sleep(0.05)
        assert admission.lag_s >= 0.1
        assert admission.limit == 100  # one late tick is a burst
        time.sleep(0.2)  # noqa: ASYNC251 (and again: the loop has fallen behind)
        await asyncio.sleep(0.05)
        assert admission.limit == pytest.approx(36)  # 90% of what was in flight
        with pytest.raises(Overloaded), admission.admit():
            pass
    finally:
        await loop.stop()


async def test_the_limit_grows_back_by_a_tenth_a_tick_while_the_worker_keeps_up() -> None:
    turns = Turns()
    admission = Admission(turns, max_turns=50, max_lag_ms=50)
    admission.limit = 10
    for _ in range(5):
        await admission.tick()
    assert admission.limit == pytest.approx(10 * 1.1**5)  # a tenth a tick
    for _ in range(40):
        await admission.tick()
    assert admission.limit == 50  # the cap


async def test_long_waits_on_two_ticks_or_a_timeout_cut_the_limit_once_a_backoff() -> None:
    turns = Turns()
    turns.n = 30
    stats = {"requests_queued": 0, "requests_wait_ms": 0, "requests_errors": 0}
    admission = Admission(
        turns, max_turns=50, max_lag_ms=1000, max_wait_ms=100, pool_stats=lambda: stats
    )
    await admission.tick()
    stats.update(requests_queued=10, requests_wait_ms=200)  # 20 ms each: a busy pool
    await admission.tick()
    assert admission.limit == 50
    stats.update(requests_queued=12, requests_wait_ms=600)  # the last two waited 200 ms
    await admission.tick()
    assert admission.limit == 50  # one tick of long waits is a burst
    stats.update(requests_queued=14, requests_wait_ms=1000)  # and again: falling behind
    await admission.tick()
    assert admission.limit == pytest.approx(27)  # 90% of the 30 in flight
    stats.update(requests_errors=1)  # a pool timeout, within the backoff: no second cut
    await admission.tick()
    assert admission.limit == pytest.approx(27)
    admission._cut_at -= 1  # the backoff has passed
    stats.update(requests_errors=2)  # another timeout
    await admission.tick()
    assert admission.limit == pytest.approx(27 * 0.9)


def test_never_below_the_floor_and_off_at_zero() -> None:
    admission = Admission(lambda: 0, max_turns=0, max_lag_ms=50)
    with admission.admit():  # off: everything is admitted
        assert admission.in_flight() == 1
    assert admission.in_flight() == 0
    low = Admission(lambda: 1, max_turns=10, max_lag_ms=0.001)
    one = Admission(lambda: 1, max_turns=1, max_lag_ms=0.001)  # a floor above the cap: the cap
    for admission in (low, one):
        for _ in range(2):  # two ticks running, each a second late
            admission._due = time.monotonic() - 1
            asyncio.run(admission.tick())
    assert low.limit == MIN_LIMIT
    assert one.limit == 1
