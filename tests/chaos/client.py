"""A customer's HTTP client that gets its request done whatever breaks underneath.

What README "Client disconnect and process death" asks of a client, plus what a phone
does: POST (a message with its client_message_id, or a decision), read the SSE stream;
when it breaks (a replica died, the balancer cut it, it went quiet for STALL_S, or the
injector cut it), follow the same run again with Last-Event-ID through the balancer; a run
that ended `abandoned` or `failed` is sent again, the same body. 409 thread_busy, 429 and
5xx are waited out (each 5xx is recorded for the checker). Every event is scanned for
another customer's ids and emails.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx

from tests.chaos.records import Http5xx, Leak, Records, RunSeen, StreamRead, now
from tests.chaos.shop import Shop

STALL_S = 8.0  # no byte for this long (heartbeats come every 2 s): the stream is dead
PAUSE_S = 0.3
GIVE_UP_S = 240.0  # one request; a soak's faults stop long before
REQUEST_S = 15.0  # a plain (non-stream) request
DONE_WANTED = ("completed", "interrupted", "cancelled", "handed_off")
RETRY_DONE = ("abandoned", "failed")
PRIVATE = re.compile(r"chaos_c\d{3}|chaos\.c\d{3}@chaos\.example|#W8\d{6}")

Event = tuple[int | None, str, dict[str, Any]]  # (SSE id, event name, data); ":" heartbeat


class GaveUp(Exception):
    """A request that did not get done in GIVE_UP_S."""


class NothingPending(Exception):
    """409 nothing_pending: the decision was already taken (a retry after a lost answer)."""


class Cuts:
    """The injector's client fault: while armed, each open stream is cut with `share`."""

    def __init__(self, seed: int) -> None:
        self.until = 0.0
        self.share = 0.0
        self._random = random.Random(seed)

    def arm(self, seconds: float, share: float) -> None:
        self.until, self.share = now() + seconds, share

    def disarm(self) -> None:
        self.until = 0.0

    def hit(self) -> bool:
        """Asked after each event of each open stream: a stream of a few dozen events is
        cut with about `share`'s odds while the fault lasts."""
        return now() < self.until and self._random.random() < self.share * 0.2


async def sse(response: httpx.Response) -> AsyncIterator[Event]:
    seq: int | None = None
    name, data = "message", list[str]()
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield seq, name, json.loads("\n".join(data))
            seq, name, data = None, "message", []
        elif line.startswith(":"):
            yield None, ":", {}
        elif line.startswith("id:"):
            seq = int(line[3:].strip())
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


async def _with_stall(events: AsyncIterator[Event]) -> AsyncIterator[Event]:
    while True:
        try:
            event = await asyncio.wait_for(anext(events), STALL_S)
        except StopAsyncIteration:
            return
        yield event


class Client:
    """One customer's view: a bearer token, the pool's balancer, the shared records."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        customer: str,
        headers: dict[str, str],
        pool: str,
        records: Records,
        cuts: Cuts,
        shop: Shop,
    ) -> None:
        self.http = http
        self.customer = customer
        self.headers = headers
        self.pool = pool
        self.records = records
        self.cuts = cuts
        self.shop = shop
        self.mentioned: set[str] = set()  # what this customer itself typed (another's order)

    def _waiting(self, what: str) -> None:
        self.records.waiting[id(self)] = f"{self.customer}: {what} since {now():.0f}"

    # --- plain requests ------------------------------------------------------------------

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request, again until it gets an answer that is not a 5xx, 409 or 429."""
        started = now()
        self._waiting(f"{method} {path}")
        while now() - started < GIVE_UP_S:
            sent = now()
            try:
                response = await self.http.request(
                    method, path, headers=self.headers, timeout=REQUEST_S, **kwargs
                )
            except httpx.TransportError:
                self.records.events["transport errors"] += 1
                await asyncio.sleep(PAUSE_S)
                continue
            if self._refused(response, sent, method, path):
                await asyncio.sleep(_pause_for(response))
                continue
            return response
        raise GaveUp(f"{method} {path}")

    def _refused(self, response: httpx.Response, sent: float, method: str, path: str) -> bool:
        status = response.status_code
        if status >= 500:
            body = response.text[:200]
            self.records.errors_5xx.append(Http5xx(sent, now(), status, method, path, body))
            self.records.events[f"http {status}"] += 1
            return True
        if status in (409, 429):
            code = _error_code(response)
            if code == "nothing_pending":
                raise NothingPending(path)
            self.records.events[f"http {status} {code}"] += 1
            return code in ("thread_busy", "rate_limited")
        return False

    # --- runs ----------------------------------------------------------------------------

    async def run(
        self,
        path: str,
        body: dict[str, Any],
        *,
        thread: str,
        expected: str | None = None,
        **options: Any,
    ) -> RunSeen:
        """POST `body` to `path` and read its run to a `done` that is not retried: the run
        (its done status is one of DONE_WANTED). `drop_after` tokens: leave the first stream
        and follow the run again; `cancel_after` tokens: cancel the run. `expected`: the
        whole answer the model gives it."""
        started = now()
        seen: RunSeen | None = None
        while now() - started < GIVE_UP_S:
            self._waiting(f"POST {path} {body} (run {seen.run_id if seen else None})")
            if seen is None:
                seen = await self._post(path, body, thread, **options)
                if seen is not None:
                    seen.expected = expected
                options = {}
            else:
                self.records.events["follows"] += 1
                if not await self._follow(seen):
                    seen = None  # no such run: sent again
                    continue
            if seen is None or seen.done is None:
                await asyncio.sleep(PAUSE_S)
                continue
            status = str(seen.done.get("status"))
            if status in RETRY_DONE:
                self.records.events[f"done {status}"] += 1
                seen = None
                await asyncio.sleep(PAUSE_S)
                continue
            if status == "completed":
                self.records.completed_at.append(now())
            return seen
        raise GaveUp(f"POST {path}")

    async def _post(
        self,
        path: str,
        body: dict[str, Any],
        thread: str,
        drop_after: int | None = None,
        cancel_after: int | None = None,
    ) -> RunSeen | None:
        sent = now()
        headers = {**self.headers, "Accept": "text/event-stream"}
        seen: RunSeen | None = None
        try:
            async with self.http.stream("POST", path, json=body, headers=headers) as response:
                if response.status_code != 200:
                    await response.aread()
                    if not self._refused(response, sent, "POST", path):
                        raise AssertionError(f"POST {path}: {response.status_code} {response.text}")
                    await asyncio.sleep(_pause_for(response))
                    return None
                seen = RunSeen(response.headers["content-location"])
                self.records.runs.append((thread, seen))
                await self._read(response, seen, 0, drop_after, cancel_after)
                return seen
        except (httpx.TransportError, TimeoutError):
            self.records.events["streams broken"] += 1
            # Broken before its headers, the request is sent again (same body); after them,
            # the run is followed.
            return seen

    async def _follow(self, seen: RunSeen) -> bool:
        """Read the run on from its last id; False when the service knows no such run."""
        after = seen.last_id
        headers = {**self.headers, "Accept": "text/event-stream", "Last-Event-ID": str(after)}
        sent = now()
        path = seen.location + "/stream"
        try:
            async with self.http.stream("GET", path, headers=headers) as response:
                if response.status_code == 404:
                    self.records.events["follow 404 run_not_found"] += 1
                    return False
                if response.status_code != 200:
                    await response.aread()
                    if not self._refused(response, sent, "GET", path):
                        raise AssertionError(f"GET {path}: {response.status_code} {response.text}")
                    return True
                await self._read(response, seen, after, None, None)
        except (httpx.TransportError, TimeoutError):
            self.records.events["streams broken"] += 1
        return True

    async def _read(
        self,
        response: httpx.Response,
        seen: RunSeen,
        after: int,
        drop_after: int | None,
        cancel_after: int | None,
    ) -> None:
        stream = StreamRead(after)
        seen.streams.append(stream)
        tokens = 0
        async for seq, name, data in _with_stall(sse(response)):
            if name == ":":
                continue
            if seq is not None:
                stream.ids.append(seq)
            self._scan(seen, data)
            if name == "token":
                seen.tokens.append(str(data.get("text", "")))
                tokens += 1
            elif name == "done":
                seen.done = data
                return
            if cancel_after is not None and tokens >= cancel_after:
                cancel_after = None
                asyncio.get_running_loop().create_task(self._cancel(seen))
            if drop_after is not None and tokens >= drop_after:
                self.records.events["streams left on purpose"] += 1
                return
            if self.cuts.hit():
                self.records.events["streams cut by the injector"] += 1
                return

    async def _cancel(self, seen: RunSeen) -> None:
        try:
            response = await self.request("POST", seen.location + "/cancel")
            self.records.events[f"cancel {response.status_code}"] += 1
        except GaveUp:
            self.records.events["cancel gave up"] += 1

    def _scan(self, seen: RunSeen, data: dict[str, Any]) -> None:
        """Another customer's id, email or order in what this customer was sent."""
        text = json.dumps(data)
        for found in set(PRIVATE.findall(text)):
            owner = self.shop.owner_of(found)
            if owner != self.customer and found not in self.mentioned:
                thread = seen.location.split("/")[2]
                self.records.leaks.append(Leak(thread, self.customer, found, owner))


def _error_code(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return ""


def _pause_for(response: httpx.Response) -> float:
    try:
        retry_after = float(response.headers.get("retry-after", PAUSE_S))
    except ValueError:
        retry_after = PAUSE_S
    return min(max(retry_after, 0.1), 2.0) * random.uniform(0.5, 1.0)
