"""What a person of the staff writes in the console, to the customer on their channel.

A channel's conversation handed to a person (queued, then accepted, or taken over) is
answered from the console as any other (`POST /staff/threads/{id}/messages`). On a Chatwoot
or email thread the message must also reach the customer there: it goes through the
channel's outbox, once (keyed by the staff message's id, which a retried post keeps).
"""

from __future__ import annotations

import uuid
from typing import Any

from app.channels.chatwoot import CHANNEL as CHATWOOT
from app.channels.mail import reply_subject
from app.channels.service import Channels


async def relay_staff_message(channels: Channels, thread_id: str, view: dict[str, Any]) -> bool:
    """Send the console message `view` to the thread's channel; False: not a channel's."""
    store = channels.store
    conv = await store.conversation_of_thread(thread_id)
    if conv is None:
        return False
    key = f"staff:{view['id']}"
    text = str(view["content"])
    if conv.channel == CHATWOOT:
        async with channels.pool.connection() as conn:
            body = {**conv.address, "content": text}
            await store.enqueue(conn, conv, key, "message", body)
    else:
        chain = await store.email_ids(conv.conversation_key)
        domain = (channels.settings.email_from or "").rpartition("@")[2] or "cs-agent.invalid"
        message_id = f"<{uuid.uuid4().hex}@{domain}>"
        mail = {
            "to": conv.address["to"],
            "subject": reply_subject(str(conv.address.get("subject") or "")),
            "message_id": message_id,
            "in_reply_to": chain[-1] if chain else conv.conversation_key,
            "references": chain or [conv.conversation_key],
            "text": text,
        }
        async with channels.pool.connection() as conn, conn.transaction():
            if await store.enqueue(conn, conv, key, "staff_email", mail):
                await store.remember_email(conn, message_id, conv.conversation_key)
    channels.outbox.nudge()
    return True
