"""The one way background work runs in a process: loops and fire-and-forget tasks.

A `Loop` runs its step every `every_s`; the first time after a random part of the interval,
so replicas started together do not all go at once. A loop can be woken early (`wake`): a
NOTIFY on its channel (app/db/listen.py) or a local event (a page that starts following a
thread); the interval is then only the fallback for a notification that never came. A step
that returns True has more work waiting and runs again at once. A step that fails (the
database is away, a lock timed out) is logged by name and tried again next time. `when`
skips a step without a query (no runs to poll, no pages to feed). Mutual exclusion across
replicas, where a job needs it, is the step's own advisory lock.

`Background` holds every loop of a process, so the lifespan lists them in one place and
stops them together; `TaskSet` is the one way to run a task nobody awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import structlog

log = structlog.get_logger(__name__)

Step = Callable[[], Awaitable[object]]


class Loop:
    def __init__(
        self,
        name: str,
        step: Step,
        every_s: float,
        *,
        when: Callable[[], bool] | None = None,
        jitter: bool = True,
        fallback_s: float | None = None,
    ) -> None:
        self.name = name
        self.step = step
        self.every_s = every_s
        # The pace while a NOTIFY wakes this loop (app/db/listen.py): only a fallback.
        self.fallback_s = fallback_s if fallback_s is not None else every_s
        self.listening = False
        self.when = when
        self.jitter = jitter
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        if self._task is None and self.every_s > 0:
            self._task = asyncio.create_task(self._forever(), name=self.name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def once(self) -> bool:
        """One step (unless `when` says there is nothing to do): True when more waits."""
        if self.when is not None and not self.when():
            return False
        try:
            return bool(await self.step())
        except Exception as error:
            log.warning("background step failed", loop=self.name, error_type=type(error).__name__)
            return False

    async def _forever(self) -> None:
        if self.jitter:
            await self._sleep(random.uniform(0, self.every_s))
        while True:
            if not await self.once():
                await self._sleep(self.fallback_s if self.listening else self.every_s)

    async def _sleep(self, seconds: float) -> None:
        # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancel that comes
        # as the wake-up does (a stop right after a wake would leave the loop running).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()
        self._wake.clear()


class TaskSet:
    """Tasks nobody awaits (a delivery, a purge, a late record): kept referenced until they
    end, a failure logged by name, cancelled together at shutdown."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coroutine: Coroutine[Any, Any, object], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            kind = type(task.exception()).__name__
            log.warning("background task failed", task=task.get_name(), error_type=kind)

    async def close(self, grace_s: float = 0.0) -> None:
        """Let the tasks under way finish for `grace_s`, then cancel the rest."""
        if self._tasks and grace_s > 0:
            await asyncio.wait(set(self._tasks), timeout=grace_s)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class Background:
    """Every loop of a process, started as they are added and stopped together."""

    def __init__(self) -> None:
        self.loops: dict[str, Loop] = {}

    def add(self, loop: Loop) -> Loop:
        if loop.name in self.loops:
            raise ValueError(f"two background loops are called {loop.name!r}")
        self.loops[loop.name] = loop
        loop.start()
        return loop

    async def close(self) -> None:
        for loop in list(self.loops.values()):
            await loop.stop()
