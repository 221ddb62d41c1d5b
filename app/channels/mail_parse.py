"""Reading an inbound email with the standard library: who sent it, which thread it answers,
the reply without its quoted history, and whether a machine wrote it (never answered)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import getaddresses, parseaddr
from typing import Any

MAX_TEXT = 8000
TOKEN_RE = re.compile(r"\[confirm ([A-Za-z0-9_-]{16,64})\]")
_MESSAGE_ID = re.compile(r"<[^<>\s]+>")
# Where the quoted history of a reply starts (the common clients' markers).
_QUOTE_STARTS = (
    re.compile(r"^\s*On\b.{0,300}\bwrote:\s*$", re.IGNORECASE),
    re.compile(r"^\s*-{2,}\s*Original Message\s*-{2,}", re.IGNORECASE),
    re.compile(r"^\s*-{2,}\s*Forwarded message\s*-{2,}", re.IGNORECASE),
    re.compile(r"^\s*From:\s.+", re.IGNORECASE),
    re.compile(r"^_{10,}\s*$"),
)
_AUTO_SENDERS = ("mailer-daemon@", "postmaster@", "noreply@", "no-reply@")


@dataclass(frozen=True)
class InboundEmail:
    sender: str  # the From address, lower case
    subject: str
    message_id: str  # "<...>"
    in_reply_to: list[str]
    references: list[str]
    text: str  # the reply, quoted history removed
    attachments: list[str] = field(default_factory=list)
    auto: str | None = None  # why a machine wrote it; None: a person did
    token: str | None = None  # a confirmation token it carries (subject or body)

    def as_body(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def thread_refs(self) -> list[str]:
        """The ids it answers, nearest first: In-Reply-To, then References from the end."""
        refs = [*self.in_reply_to, *reversed(self.references)]
        return list(dict.fromkeys(refs))


def message_ids(value: str | None) -> list[str]:
    return _MESSAGE_ID.findall(value or "")


def reply_text(body: str) -> str:
    """The new text of a reply: up to the first quote marker, without `>` lines."""
    kept: list[str] = []
    for line in body.replace("\r\n", "\n").split("\n"):
        if any(marker.match(line) for marker in _QUOTE_STARTS):
            break
        if line.lstrip().startswith(">"):
            continue
        kept.append(line)
    text = "\n".join(kept).strip()
    if "\n-- \n" in f"\n{text}\n":  # the signature separator
        text = f"\n{text}\n".split("\n-- \n")[0].strip()
    return text[:MAX_TEXT]


def auto_reason(headers: dict[str, str], sender: str, own_address: str | None) -> str | None:
    """Why this message must not be answered (RFC 3834 and the common headers), or None."""
    lower = {k.lower(): v.strip().lower() for k, v in headers.items()}
    if lower.get("auto-submitted", "no") not in ("", "no"):
        return "auto-submitted"
    if lower.get("precedence") in ("bulk", "junk", "list", "auto_reply"):
        return "precedence"
    if "x-autoreply" in lower or "x-autorespond" in lower or "list-id" in lower:
        return "automatic"
    if own_address and sender == own_address.lower():
        return "own_address"
    if sender.startswith(_AUTO_SENDERS) or lower.get("return-path") == "<>":
        return "bounce"
    return None


def _token(*texts: str) -> str | None:
    for text in texts:
        found = TOKEN_RE.search(text or "")
        if found:
            return found.group(1)
    return None


def _fallback_id(*parts: str) -> str:
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]
    return f"<{digest}@inbound.invalid>"


def from_rfc822(raw: bytes, own_address: str | None) -> InboundEmail:
    message = BytesParser(policy=policy.default).parsebytes(raw)
    assert isinstance(message, EmailMessage)
    sender = parseaddr(str(message.get("From", "")))[1].strip().lower()
    subject = str(message.get("Subject", "")).strip()
    part = message.get_body(preferencelist=("plain",))
    body = part.get_content() if part is not None else ""
    attachments = [str(a.get_filename() or "attachment") for a in message.iter_attachments()]
    headers = {k: str(v) for k, v in message.items()}
    own_ids = message_ids(str(message.get("Message-ID", "")))
    return InboundEmail(
        sender=sender,
        subject=subject,
        message_id=own_ids[0] if own_ids else _fallback_id(sender, subject, body),
        in_reply_to=message_ids(str(message.get("In-Reply-To", ""))),
        references=message_ids(str(message.get("References", ""))),
        text=reply_text(str(body)),
        attachments=attachments,
        auto=auto_reason(headers, sender, own_address),
        token=_token(subject, str(body)),
    )


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def from_postmark(data: dict[str, Any], own_address: str | None) -> InboundEmail:
    """Postmark's inbound JSON: From/FromFull, Subject, TextBody, StrippedTextReply,
    Headers [{Name, Value}], Attachments [{Name}]; the sender's Message-ID is a header."""
    full: dict[str, Any] = data["FromFull"] if isinstance(data.get("FromFull"), dict) else {}
    addresses = getaddresses([str(full.get("Email") or data.get("From") or "")])
    sender = (addresses[0][1] if addresses else "").strip().lower()
    headers = {
        str(h.get("Name")): str(h.get("Value"))
        for h in _list(data.get("Headers"))
        if isinstance(h, dict) and h.get("Name")
    }
    lower = {k.lower(): v for k, v in headers.items()}
    subject = str(data.get("Subject") or "").strip()
    body = str(data.get("TextBody") or "")
    stripped = str(data.get("StrippedTextReply") or "")
    own_ids = message_ids(lower.get("message-id"))
    return InboundEmail(
        sender=sender,
        subject=subject,
        message_id=own_ids[0]
        if own_ids
        else _fallback_id(sender, str(data.get("MessageID") or ""), subject),
        in_reply_to=message_ids(lower.get("in-reply-to")),
        references=message_ids(lower.get("references")),
        text=reply_text(stripped or body),
        attachments=[
            str(a.get("Name") or "attachment")
            for a in _list(data.get("Attachments"))
            if isinstance(a, dict)
        ],
        auto=auto_reason(headers, sender, own_address),
        token=_token(subject, body),
    )
