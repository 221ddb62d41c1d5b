"""Delivering one message to a customer: the Sender protocol and its three kinds."""

from __future__ import annotations

import asyncio
import smtplib
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Protocol

import httpx
import structlog

from app.config import Settings

log = structlog.get_logger(__name__)

SEND_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Message:
    recipient: str
    subject: str
    body: str


class Sender(Protocol):
    @property
    def records_only(self) -> bool:
        """True when nothing leaves the process: the outbox row and the log are the delivery."""
        ...

    async def send(self, message: Message) -> None: ...

    async def aclose(self) -> None: ...


class LogSender:
    """Dev: the message is written to the log (and the outbox), not delivered."""

    records_only = True

    async def send(self, message: Message) -> None:
        log.warning(
            "outbox message (dev: not delivered)",
            recipient=message.recipient,
            subject=message.subject,
            body=message.body,
        )

    async def aclose(self) -> None:
        return None


class WebhookSender:
    """POSTs {"to", "subject", "body"} as JSON; any 2xx is delivered."""

    records_only = False

    def __init__(
        self, url: str, token: str | None = None, client: httpx.AsyncClient | None = None
    ) -> None:
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = client or httpx.AsyncClient(timeout=SEND_TIMEOUT_S)

    async def send(self, message: Message) -> None:
        body = {"to": message.recipient, "subject": message.subject, "body": message.body}
        response = await self.client.post(self.url, json=body, headers=self.headers)
        response.raise_for_status()

    async def aclose(self) -> None:
        await self.client.aclose()


@dataclass(frozen=True)
class SmtpSender:
    """smtplib in a worker thread: a message every few minutes does not need an async SMTP
    client."""

    host: str
    port: int
    sender: str
    username: str | None = None
    password: str | None = None
    starttls: bool = True
    records_only = False

    async def send(self, message: Message) -> None:
        await asyncio.to_thread(self._send, message)

    def _send(self, message: Message) -> None:
        email = EmailMessage()
        email["From"], email["To"], email["Subject"] = (
            self.sender,
            message.recipient,
            message.subject,
        )
        email.set_content(message.body)
        with smtplib.SMTP(self.host, self.port, timeout=SEND_TIMEOUT_S) as smtp:
            if self.starttls:
                smtp.starttls(context=ssl.create_default_context())
            if self.username:
                smtp.login(self.username, self.password or "")
            smtp.send_message(email)

    async def aclose(self) -> None:
        return None


def sender_from(settings: Settings) -> Sender:
    """The configured sender; a webhook or SMTP sender without its address refuses to start."""
    if settings.notify_sender == "webhook":
        if not settings.notify_webhook_url:
            raise ValueError("NOTIFY_SENDER=webhook needs NOTIFY_WEBHOOK_URL")
        token = settings.notify_webhook_token
        return WebhookSender(
            settings.notify_webhook_url, token.get_secret_value() if token else None
        )
    if settings.notify_sender == "smtp":
        if not settings.smtp_host:
            raise ValueError("NOTIFY_SENDER=smtp needs SMTP_HOST")
        password = settings.smtp_password
        return SmtpSender(
            host=settings.smtp_host,
            port=settings.smtp_port,
            sender=settings.smtp_from,
            username=settings.smtp_username,
            password=password.get_secret_value() if password else None,
            starttls=settings.smtp_starttls,
        )
    if settings.app_env == "prod":
        log.warning("NOTIFY_SENDER=log in prod: identity codes reach no customer")
    return LogSender()
