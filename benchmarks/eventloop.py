"""The event loop the benchmark processes run on: the service's.

uvicorn runs the service on uvloop when it is installed (`uvicorn[standard]` installs it),
so the in-process runs (ceiling (a), item 1's in-process turns) and the load generator run
on it too. On asyncio's own loop the same in-process graph costs about a fifth more CPU a
turn on this machine, which made ceiling (a) look lower than LangGraph can do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:  # uvicorn then runs the service on asyncio's loop as well
        return asyncio.run(main)
    return uvloop.run(main)
