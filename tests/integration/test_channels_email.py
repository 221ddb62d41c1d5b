"""Email over real processes: inbound messages POSTed to the service under uvicorn (scripted
model), answers sent by SMTP to a real SMTP server (aiosmtpd) and read back from it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

import httpx
import pytest
from aiosmtpd.controller import Controller
from psycopg_pool import AsyncConnectionPool
from pydantic import SecretStr

from app.api.auth import issue_token
from app.config import Settings
from tests.fakellm import Reply, Script, ScriptedModelServer
from tests.integration.agent_harness import load_small_shop
from tests.integration.api_harness import LiveServer, live_server
from tests.integration.test_channels_chatwoot import PENDING_ORDER, settled

NOAH = "noah_brown_6181"
NOAH_EMAIL = "noah.brown7922@example.com"
SUPPORT = "support@shop.example"
SECRET = "email-inbound-secret"
AUTH = {"Authorization": f"Bearer {SECRET}", "Content-Type": "message/rfc822"}


class Mailbox:
    """aiosmtpd's handler: every message the service sends, parsed."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        parsed = message_from_bytes(envelope.content, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        self.messages.append(parsed)
        return "250 OK"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def mailbox() -> Iterator[tuple[Mailbox, int]]:
    box, port = Mailbox(), free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    yield box, port
    controller.stop()


@pytest.fixture(scope="module")
def server(
    database_url: str,
    scripted_model_session: ScriptedModelServer,
    mailbox: tuple[Mailbox, int],
) -> Iterator[LiveServer]:
    settings = Settings(  # type: ignore[call-arg]
        database_url=database_url,
        email_inbound_secret=SecretStr(SECRET),
        email_from=SUPPORT,
        email_answers_per_hour=3,
        smtp_host="127.0.0.1",
        smtp_port=mailbox[1],
        smtp_starttls=False,
        _env_file=None,
    )
    with live_server(settings, scripted_model_session) as live:
        yield live


@pytest.fixture
async def shop(
    db: AsyncConnectionPool[Any], mailbox: tuple[Mailbox, int]
) -> AsyncConnectionPool[Any]:
    await load_small_shop(db)
    async with db.connection() as conn:
        await conn.execute(
            "TRUNCATE channel_conversations, channel_inbox, channel_outbox, email_message_ids, "
            "channel_confirmations"
        )
    mailbox[0].messages.clear()
    return db


def email(
    text: str,
    message_id: str,
    *,
    sender: str = NOAH_EMAIL,
    subject: str = "My order",
    in_reply_to: str | None = None,
    references: list[str] | None = None,
    headers: dict[str, str] | None = None,
) -> bytes:
    mail = EmailMessage()
    mail["From"] = f"Noah Brown <{sender}>"
    mail["To"] = SUPPORT
    mail["Subject"] = subject
    mail["Message-ID"] = message_id
    if in_reply_to:
        mail["In-Reply-To"] = in_reply_to
    if references:
        mail["References"] = " ".join(references)
    for name, value in (headers or {}).items():
        mail[name] = value
    mail.set_content(text)
    return bytes(mail)


async def post(server: LiveServer, raw: bytes, headers: dict[str, str] = AUTH) -> httpx.Response:
    async with server.client() as client:
        return await client.post("/channels/email/inbound", content=raw, headers=headers)


async def received(box: Mailbox, n: int, timeout_s: float = 15.0) -> list[EmailMessage]:
    for _ in range(int(timeout_s / 0.05)):
        if len(box.messages) >= n:
            break
        await asyncio.sleep(0.05)
    assert len(box.messages) >= n, f"{len(box.messages)} emails, expected {n}"
    return box.messages


async def order_status(pool: AsyncConnectionPool[Any]) -> str:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT status FROM orders WHERE id = %s", (PENDING_ORDER,))
        row = await cur.fetchone()
    assert row is not None
    return str(row["status"])


def cancel_script(*then: Reply) -> Script:
    cancel = Reply.call("cancel_pending_order", order_id=PENDING_ORDER, reason="ordered by mistake")
    return Script([cancel, *then])


class TestThreads:
    async def test_an_email_is_answered_in_the_same_thread_with_threading_headers(
        self,
        server: LiveServer,
        mailbox: tuple[Mailbox, int],
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        box = mailbox[0]
        model_server.use(Script([Reply.say("It ships tomorrow."), Reply.say("You are welcome.")]))
        got = await post(server, email("Where is my order?", "<m1@customer.example>"))
        assert got.status_code == 202 and got.json() == {"status": "stored"}
        (answer,) = await received(box, 1)
        assert answer["To"] == NOAH_EMAIL and answer["From"] == SUPPORT
        assert answer["Subject"] == "Re: My order"
        assert answer["In-Reply-To"] == "<m1@customer.example>"
        assert answer["References"] == "<m1@customer.example>"
        assert answer["Auto-Submitted"] == "auto-replied"
        assert answer.get_content().strip() == "It ships tomorrow."
        ours = answer["Message-ID"]
        assert ours.endswith("@shop.example>")

        quoted = f"Thanks!\n\nOn Mon, Support <{SUPPORT}> wrote:\n> It ships tomorrow.\n"
        reply = email(
            quoted,
            "<m2@customer.example>",
            subject="Re: My order",
            in_reply_to=ours,
            references=["<m1@customer.example>", ours],
        )
        await post(server, reply)
        second = (await received(box, 2))[1]
        assert second["In-Reply-To"] == "<m2@customer.example>"
        assert second["References"].split() == [
            "<m1@customer.example>",
            ours,
            "<m2@customer.example>",
        ]
        assert second["Subject"] == "Re: My order"
        # one conversation, the customer's, with the reply's text only (no quoted history)
        async with shop.connection() as conn:
            cur = await conn.execute("SELECT user_id, session_id FROM channel_conversations")
            rows = await cur.fetchall()
        assert len(rows) == 1 and rows[0]["user_id"] == NOAH
        async with server.client() as client:
            state = await client.get(
                f"/threads/{rows[0]['session_id']}/state", headers=server.headers(NOAH)
            )
        body = state.json()
        assert body["channel"] == {"name": "email", "link": None}
        assert [m["content"] for m in body["messages"]] == [
            "Where is my order?",
            "It ships tomorrow.",
            "Thanks!",
            "You are welcome.",
        ]

    async def test_a_postmark_inbound_json_is_answered(
        self,
        server: LiveServer,
        mailbox: tuple[Mailbox, int],
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        model_server.use(Script([Reply.say("Hello from support.")]))
        payload = {
            "From": NOAH_EMAIL,
            "FromFull": {"Email": NOAH_EMAIL, "Name": "Noah"},
            "Subject": "Question",
            "MessageID": "22c74902-a0c1-4511-804f-341342852c90",
            "TextBody": "Hi there",
            "StrippedTextReply": "",
            "Headers": [{"Name": "Message-ID", "Value": "<pm1@customer.example>"}],
            "Attachments": [],
        }
        async with server.client() as client:
            got = await client.post(
                "/channels/email/postmark",
                json=payload,
                headers={"Authorization": f"Bearer {SECRET}"},
            )
        assert got.status_code == 202
        (answer,) = await received(mailbox[0], 1)
        assert answer["In-Reply-To"] == "<pm1@customer.example>"
        assert answer.get_content().strip() == "Hello from support."

    async def test_a_wrong_secret_is_401_and_a_wrong_type_415(
        self, server: LiveServer, shop: AsyncConnectionPool[Any]
    ) -> None:
        raw = email("hi", "<x1@customer.example>")
        wrong = await post(server, raw, {**AUTH, "Authorization": "Bearer nope"})
        missing = await post(server, raw, {"Content-Type": "message/rfc822"})
        assert wrong.status_code == missing.status_code == 401
        typed = await post(server, raw, {**AUTH, "Content-Type": "text/plain"})
        assert typed.status_code == 415
        async with shop.connection() as conn:
            cur = await conn.execute("SELECT count(*) AS n FROM channel_inbox")
            assert (await cur.fetchone()) == {"n": 0}


class TestLoops:
    async def test_auto_replies_are_stored_and_never_answered(
        self,
        server: LiveServer,
        mailbox: tuple[Mailbox, int],
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        auto = [
            email(
                "Out of office", "<a1@customer.example>", headers={"Auto-Submitted": "auto-replied"}
            ),
            email("News", "<a2@customer.example>", headers={"Precedence": "bulk"}),
            email("Loop", "<a3@customer.example>", sender=SUPPORT),
        ]
        for raw in auto:
            got = await post(server, raw)
            assert got.status_code == 202 and got.json() == {"status": "not_answered"}
        await settled(shop)
        await asyncio.sleep(0.5)
        assert mailbox[0].messages == [] and model_server.requests == []

    async def test_at_most_n_answers_per_thread_per_hour(
        self,
        server: LiveServer,
        mailbox: tuple[Mailbox, int],
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        model_server.use(Script([Reply.say(f"Answer {i}.") for i in range(4)]))
        previous = None
        for i in range(4):
            raw = email(f"question {i}", f"<q{i}@customer.example>", in_reply_to=previous)
            await post(server, raw)
            previous = f"<q{i}@customer.example>"
            await settled(shop)
        assert [m.get_content().strip() for m in mailbox[0].messages] == [
            "Answer 0.",
            "Answer 1.",
            "Answer 2.",
        ]


class TestConfirmation:
    async def test_a_cancel_is_confirmed_by_a_reply_to_the_confirmation_email(
        self,
        server: LiveServer,
        mailbox: tuple[Mailbox, int],
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        model_server.use(cancel_script(Reply.say("Done: your order is cancelled.")))
        await post(server, email("Please cancel my order", "<c1@customer.example>"))
        (question,) = await received(mailbox[0], 1)
        assert "[confirm " in question["Subject"] and PENDING_ORDER in question.get_content()
        assert await order_status(shop) == "pending"
        quoted = "YES\n\nOn Mon, Support wrote:\n> " + question.get_content().replace("\n", "\n> ")
        reply = email(
            quoted,
            "<c2@customer.example>",
            subject=f"Re: {question['Subject']}",
            in_reply_to=question["Message-ID"],
        )
        await post(server, reply)
        done = (await received(mailbox[0], 2))[1]
        assert done.get_content().strip() == "Done: your order is cancelled."
        assert await order_status(shop) == "cancelled"

    async def test_a_forged_senders_write_never_runs(
        self,
        server: LiveServer,
        mailbox: tuple[Mailbox, int],
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        """Someone writes as Noah: the confirmation goes to Noah's mailbox, which the forger
        never reads; their "YES" (even threaded to our email) carries no token."""
        model_server.use(cancel_script(Reply.say("Could you tell me more?")))
        await post(server, email("cancel my order", "<f1@forger.example>"))
        (question,) = await received(mailbox[0], 1)
        assert question["To"] == NOAH_EMAIL
        forged_yes = email(
            "YES",
            "<f2@forger.example>",
            subject="Re: My order",
            in_reply_to=question["Message-ID"],
        )
        await post(server, forged_yes)
        await settled(shop)
        assert await order_status(shop) == "pending"
        async with shop.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n FROM tool_executions WHERE tool_name = 'cancel_pending_order'"
            )
            assert (await cur.fetchone()) == {"n": 0}


class TestHandoff:
    async def test_a_person_answers_a_handed_off_email_thread_from_the_console(
        self,
        server: LiveServer,
        mailbox: tuple[Mailbox, int],
        model_server: ScriptedModelServer,
        shop: AsyncConnectionPool[Any],
    ) -> None:
        box = mailbox[0]
        model_server.use(
            Script(
                [
                    Reply.call("transfer_to_human_agents", summary="wants a refund exception"),
                    Reply.say("A colleague will write to you."),
                ]
            )
        )
        await post(server, email("I want a person", "<h1@customer.example>"))
        (handed,) = await received(box, 1)  # a handoff asks no confirmation
        assert handed.get_content().strip() == "A colleague will write to you."
        # the customer writes again while nobody has accepted: stored, no model, no answer
        calls = len(model_server.requests)
        await post(
            server, email("hello?", "<h3@customer.example>", in_reply_to=handed["Message-ID"])
        )
        await settled(shop)
        assert len(model_server.requests) == calls and len(box.messages) == 1

        async with shop.connection() as conn:
            cur = await conn.execute("SELECT thread_id FROM channel_conversations")
            thread = (await cur.fetchone())["thread_id"]
        secret = server.settings.jwt_secret.get_secret_value()
        token = issue_token(secret, "staff-ann", role="staff", name="Ann")
        h = {"Authorization": f"Bearer {token}"}
        async with server.client() as client:
            control = (await client.get(f"/staff/threads/{thread}/control", headers=h)).json()
            assert control["state"] == "queued"
            accepted = await client.post(
                f"/staff/threads/{thread}/control",
                json={"action": "accept", "version": control["version"]},
                headers=h,
            )
            assert accepted.status_code == 200, accepted.text
            said = await client.post(
                f"/staff/threads/{thread}/messages",
                json={"content": "Hi Noah, Ann here: I can help.", "client_message_id": "s1"},
                headers=h,
            )
            again = await client.post(
                f"/staff/threads/{thread}/messages",
                json={"content": "Hi Noah, Ann here: I can help.", "client_message_id": "s1"},
                headers=h,
            )
        assert said.status_code == again.status_code == 200
        person = (await received(box, 2))[1]
        assert person["To"] == NOAH_EMAIL and person["In-Reply-To"] == "<h3@customer.example>"
        assert person.get_content().strip() == "Hi Noah, Ann here: I can help."
        await settled(shop)
        assert len(box.messages) == 2  # the retried post is sent once
