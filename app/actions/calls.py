"""One call to a remote tool, read or write, with the guarantees of a built-in one.

A read is sent as it is. A write is recorded before it is sent and carries its
idempotency key; when no result comes back, an idempotent write is resent with the same
key (at most `MAX_RESENDS` times, the first result standing), any other is never resent:
its outcome is unknown, and the thread goes to a person (`OUTCOME_UNKNOWN`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
import structlog
from psycopg_pool import AsyncConnectionPool

from app.actions import ledger
from app.actions.ledger import CallRecord
from app.actions.remote import (
    SERVER_TEXT_LIMIT,
    Answered,
    NoAnswer,
    NotSent,
    RemoteTool,
    Source,
    capped,
)
from app.errors import connection_lost
from app.jsontext import compact_json
from app.retry import retried, stepped_s
from app.tools.results import Observation, error_text, failed_with, found
from app.turn import writing

log = structlog.get_logger(__name__)
T = TypeVar("T")

MAX_RESENDS = 2  # an idempotent write is sent at most three times, always with one key
LEDGER_TRIES, LEDGER_RETRY_WAITS_S = 4, (0.2, 0.5, 1.0)  # a ledger step after a send
HANDOFF_REASON = "write_outcome_unknown"
SOURCE_DOWN = error_text(
    "this service is not answering right now; nothing was sent. Try again later, or "
    "answer with what you have."
)
NO_ANSWER = error_text("this service did not answer in time. Try again later.")
SOURCE_FAILED = error_text("this service failed to handle the request. Try again later.")
OUTCOME_UNKNOWN = error_text(
    "the request was sent but its outcome is not known; a person is checking it. Do NOT "
    "call it again: tell the customer a colleague will confirm the result."
)


@dataclass(frozen=True)
class Target:
    source: Source
    tool: RemoteTool
    token: str | None  # X-Customer-Token


def answered(tool: RemoteTool, answer: Answered) -> Observation:
    """A server's answer as the model reads it (its own error text capped, never ours)."""
    if answer.ok:
        return found(answer.text or "Done.")
    if not answer.text or _looks_like_a_trace(answer.text):
        return failed_with("failed", SOURCE_FAILED)
    reason = capped(answer.text, SERVER_TEXT_LIMIT)
    return failed_with("refused", error_text(f"{tool.name} was refused: {reason}"))


def _looks_like_a_trace(text: str) -> bool:
    return "Traceback (most recent call last)" in text or '  File "' in text


async def read(target: Target, args: Mapping[str, Any]) -> Observation:
    try:
        return answered(
            target.tool, await target.source.call(target.tool, args, key=None, token=target.token)
        )
    except NotSent:
        return failed_with("failed", SOURCE_DOWN)
    except NoAnswer:
        return failed_with("failed", NO_ANSWER)


async def write(
    pool: AsyncConnectionPool[Any], target: Target, record: CallRecord, args: Mapping[str, Any]
) -> Observation:
    """Send the write once per key; a call this key already settled gets its result. A
    cancel of the run waits for it (as for a built-in write), so a customer's stop never
    cuts a call between its send and its record."""
    with writing():
        earlier = await ledger.claim(pool, record)
        if earlier is not None:
            return await settle(pool, target, record, args, earlier)
        return await _deliver(pool, target, record, args, first=True)


async def settle(
    pool: AsyncConnectionPool[Any],
    target: Target,
    record: CallRecord,
    args: Mapping[str, Any],
    earlier: ledger.Prior,
) -> Observation:
    """A call an earlier attempt left: its result if it has one; else, sent and never
    answered (a crash), by the rules of unknown outcomes."""
    if earlier.state == "done":
        return answered(target.tool, Answered(earlier.ok, _recorded_text(earlier)))
    if earlier.state == "unknown":
        return failed_with("outcome_unknown", OUTCOME_UNKNOWN)
    if target.tool.idempotent:
        return await _deliver(pool, target, record, args, first=False)
    return await _unknown(pool, target, record)


async def _deliver(
    pool: AsyncConnectionPool[Any],
    target: Target,
    record: CallRecord,
    args: Mapping[str, Any],
    *,
    first: bool,
) -> Observation:
    sends_left = first
    while True:
        if not sends_left and not (
            target.tool.idempotent
            and await _again(record, lambda: ledger.resend(pool, record.key, 1 + MAX_RESENDS))
        ):
            return await _unknown(pool, target, record)
        try:
            answer = await target.source.call(target.tool, args, key=record.key, token=target.token)
        except NotSent:
            if first:  # the only send never left: nothing happened, it may be made again
                await _again(record, lambda: ledger.forget(pool, record.key))
                return failed_with("failed", SOURCE_DOWN)
            sends_left = False
            continue
        except NoAnswer:
            log.warning("action sent, no answer", tool=record.tool_name, key=record.key)
            first = sends_left = False
            continue
        ok, text = await _store(pool, record, answer)
        return answered(target.tool, Answered(ok, _recorded_text_of(ok, text)))


async def _store(
    pool: AsyncConnectionPool[Any], record: CallRecord, answer: Answered
) -> tuple[bool, str]:
    """The server's answer, stored (the first result stands)."""
    return await _again(
        record, lambda: ledger.finish(pool, record, answer.ok, _stored_text(answer))
    )


async def _again(record: CallRecord, step: Callable[[], Awaitable[T]]) -> T:
    """A step of the ledger once the call may have been sent. A connection lost under it
    (its COMMIT's reply, say) leaves the step done or not; each is safe to take again (a
    stored answer: the first stands; a resend count: at worst one send fewer; a forget or
    an unknown: only while the row is `sent`), so it is tried again on a fresh connection
    rather than told as a failure of a call the server may have applied."""

    def lost(error: BaseException) -> bool:
        return isinstance(error, psycopg.OperationalError) and connection_lost(error)

    def noted(error: BaseException) -> None:
        log.warning("action's ledger step again", tool=record.tool_name, key=record.key)

    return await retried(
        lambda _: step(),
        tries=LEDGER_TRIES,
        retryable=lost,
        wait_s=lambda failures: stepped_s(failures, LEDGER_RETRY_WAITS_S),
        on_retry=noted,
    )


async def _unknown(
    pool: AsyncConnectionPool[Any], target: Target, record: CallRecord
) -> Observation:
    summary = (
        f"The outcome of {record.tool_name} (from {target.tool.source}) is unknown: it was "
        f"sent and no result came back. Check with the service before doing anything. "
        f"Arguments: {compact_json(dict(record.arguments))}. Idempotency key: {record.key}."
    )
    await _again(record, lambda: ledger.mark_unknown(pool, record, OUTCOME_UNKNOWN, summary))
    return failed_with("outcome_unknown", OUTCOME_UNKNOWN)


# A failure the server gave no text for is recorded as this, and read back as SOURCE_FAILED.
_NO_TEXT = "-"


def _stored_text(answer: Answered) -> str:
    return answer.text or (_NO_TEXT if not answer.ok else "")


def _recorded_text_of(ok: bool, text: str) -> str:
    return "" if (not ok and text == _NO_TEXT) else text


def _recorded_text(earlier: ledger.Prior) -> str:
    return _recorded_text_of(earlier.ok, earlier.outcome)
