"""The channels' inbound routes: Chatwoot's agent-bot webhook and inbound email.

Each stores what it was given before it answers (docs/channels.md): the turn runs later, in
the background, on whichever replica claims it, so a crash after the 2xx loses nothing.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import uuid
from typing import Any

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.api.deps import ServicesDep
from app.api.routes.common import JSON_ERRORS
from app.api.routes.staff import FullThreadId, Staff, _thread
from app.channels.chatwoot import CHANNEL as CHATWOOT
from app.channels.chatwoot import classify, signature_ok
from app.channels.mail import store_inbound
from app.channels.mail_parse import InboundEmail, from_postmark, from_rfc822
from app.channels.service import Channels
from app.errors import AppError, Conflict, NotFound

router = APIRouter(tags=["channels"])
log = structlog.get_logger(__name__)


def _channels(channels: Channels | None, secret: str | None, name: str) -> Channels:
    if channels is None or secret is None:
        raise NotFound(f"the {name} channel is not configured", code="channel_not_configured")
    return channels


def _unauthorized(message: str, code: str) -> AppError:
    return AppError(message, code=code, status_code=401)


def _media(request: Request, *allowed: str) -> None:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype not in allowed:
        raise AppError(
            f"send the body as {' or '.join(allowed)}",
            code="unsupported_media_type",
            status_code=415,
        )


@router.post(
    "/channels/chatwoot/webhook",
    responses=JSON_ERRORS,
    summary="Chatwoot agent-bot events (signed); stored, answered in the background",
)
async def chatwoot_webhook(request: Request, services: ServicesDep) -> JSONResponse:
    channels = _channels(services.channels, _chatwoot_secret(services.channels), "Chatwoot")
    secret = channels.chatwoot_secret or ""
    raw = await request.body()
    headers = request.headers
    signed = signature_ok(
        secret, headers.get("x-chatwoot-timestamp"), headers.get("x-chatwoot-signature"), raw
    )
    if not signed:
        raise _unauthorized(
            "the X-Chatwoot-Signature is missing, wrong or older than 5 minutes",
            "invalid_signature",
        )
    try:
        payload = json.loads(raw)
    except ValueError:
        raise AppError("the body is not JSON", code="invalid_json", status_code=400) from None
    if not isinstance(payload, dict):
        raise AppError("the body is not a JSON object", code="invalid_json", status_code=400)
    event = classify(payload, headers.get("x-chatwoot-delivery"))
    if event is None:
        return JSONResponse({"status": "ignored"})
    async with channels.pool.connection() as conn:
        stored = await channels.store.receive(
            conn, CHATWOOT, event.delivery_key, event.conversation_key, event.kind, event.body
        )
    if stored:
        channels.stored()
    return JSONResponse({"status": "stored" if stored else "duplicate"})


def _email_auth(request: Request, secret: str) -> None:
    """`Authorization: Bearer <EMAIL_INBOUND_SECRET>`, or Basic with it as the password
    (what Postmark's inbound URL sends)."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    given = ""
    if scheme.lower() == "bearer":
        given = value.strip()
    elif scheme.lower() == "basic":
        try:
            given = base64.b64decode(value.strip()).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            given = ""
    if not given or not hmac.compare_digest(given.encode(), secret.encode()):
        raise _unauthorized("a valid EMAIL_INBOUND_SECRET is required", "unauthorized")


async def _store_email(channels: Channels, mail: InboundEmail) -> JSONResponse:
    if not mail.sender or "@" not in mail.sender:
        raise AppError("the message has no sender address", code="invalid_email", status_code=422)
    stored = await store_inbound(channels.pool, channels.store, mail)
    if stored and mail.auto is None:
        channels.stored()
    status = "duplicate" if not stored else ("stored" if mail.auto is None else "not_answered")
    return JSONResponse({"status": status}, status_code=202)


@router.post(
    "/channels/email/inbound",
    responses=JSON_ERRORS,
    status_code=202,
    summary="An inbound email (message/rfc822, Bearer EMAIL_INBOUND_SECRET)",
)
async def email_inbound(request: Request, services: ServicesDep) -> JSONResponse:
    channels = _channels(services.channels, _email_secret(services.channels), "email")
    _email_auth(request, channels.email_secret or "")
    _media(request, "message/rfc822")
    raw = await request.body()
    try:
        mail = from_rfc822(raw, services.settings.email_from)
    except Exception:
        raise AppError("the body is not a readable email", code="invalid_email") from None
    return await _store_email(channels, mail)


@router.post(
    "/channels/email/postmark",
    responses=JSON_ERRORS,
    status_code=202,
    summary="An inbound email as Postmark's inbound webhook JSON",
)
async def email_postmark(request: Request, services: ServicesDep) -> JSONResponse:
    channels = _channels(services.channels, _email_secret(services.channels), "email")
    _email_auth(request, channels.email_secret or "")
    _media(request, "application/json")
    try:
        data: Any = json.loads(await request.body())
    except ValueError:
        raise AppError("the body is not JSON", code="invalid_json") from None
    if not isinstance(data, dict):
        raise AppError("the body is not a JSON object", code="invalid_json")
    return await _store_email(channels, from_postmark(data, services.settings.email_from))


def _email_secret(channels: Channels | None) -> str | None:
    return channels.email_secret if channels is not None else None


def _chatwoot_secret(channels: Channels | None) -> str | None:
    return channels.chatwoot_secret if channels is not None else None


@router.post(
    "/staff/threads/{thread_id}/channel/release",
    responses=JSON_ERRORS,
    summary="Hand a thread Chatwoot's people hold back to the agent, from the console",
)
async def release_channel_thread(
    thread_id: FullThreadId, staff: Staff, services: ServicesDep
) -> dict[str, Any]:
    """The console's release of a thread held by the channel (assignee `chatwoot`); the
    Chatwoot conversation goes back to `pending`, the bot's status."""
    channels = services.channels
    if channels is None:
        raise NotFound("no channel is configured", code="channel_not_configured")
    thread = _thread(thread_id)
    await services.inspector.require_thread(thread)
    conv = await channels.store.conversation_of_thread(thread)
    if conv is None or not await channels.turns.release_from_channel(conv):
        raise Conflict("no channel holds this conversation", code="control_conflict")
    log.info("channel thread released from the console", thread_id=thread, staff=staff.user_id)
    if conv.channel == CHATWOOT:
        body = {**conv.address, "status": "pending"}
        async with channels.pool.connection() as conn:
            await channels.store.enqueue(conn, conv, f"release:{uuid.uuid4()}", "status", body)
        channels.outbox.nudge()
    return await services.controls.get(thread)
