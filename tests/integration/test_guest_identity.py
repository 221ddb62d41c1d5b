"""Issue 18, section 1: knowing an email is not proof of identity. A guest becomes a customer
only with the one-time code sent to the customer's registered email; lookups answer alike
whether or not anyone matched; a guest may learn an order's status (only) from its id and
email. Real Postgres, a real webhook endpoint and SMTP conversation, the real service."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import socketserver
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import httpx
import pytest
from langchain_core.tools import BaseTool
from langgraph.types import Command
from psycopg_pool import AsyncConnectionPool

from app.config import Settings
from app.notify.codes import CodePolicy, IdentityCodes, code_key
from app.notify.outbox import MASK, Outbox
from app.notify.senders import LogSender, Message, SmtpSender, WebhookSender
from app.tools.identity import CODE_SENT, NO_ATTEMPTS, NO_CODE, NO_ORDER_MATCH, TOO_MANY_CODES
from app.tools.registry import build_tools
from app.tools.scope import NOT_VERIFIED
from tests import factories as f
from tests.fakellm import Reply, Script, ScriptedModelServer
from tests.integration.agent_harness import load_small_shop
from tests.integration.api_harness import LiveServer, live_server

SARA, BOB = "sara_doe_496", "bob_lee_1"
BOB_EMAIL = "Bob@Example.com"  # as registered; guests type it in any case
KEY = code_key("test-secret")
POLICY = CodePolicy(ttl_s=600, max_attempts=5, per_hour=5)
SENT = CODE_SENT.format(digits=6, minutes=10)
_CODE = re.compile(r"\b(\d{6})\b")


async def emailed_code(pool: AsyncConnectionPool[Any], recipient: str) -> str:
    """The code in the newest message the outbox holds for `recipient`."""
    [row] = await f.rows(
        pool, "SELECT body FROM outbox WHERE recipient = %s ORDER BY id DESC LIMIT 1", recipient
    )
    match = _CODE.search(row["body"])
    assert match, row["body"]
    return match.group(1)


def guest(session: str = "s1", user_id: str = "guest-1") -> Any:
    return f.tool_runtime(user_id=user_id, role="guest", session=session)


@pytest.fixture
async def tools(db: AsyncConnectionPool[Any]) -> dict[str, BaseTool]:
    bob = f.customer(
        BOB,
        first_name="Bob",
        last_name="Lee",
        email=BOB_EMAIL,
        payment_methods=(f.credit_card("credit_card_bob", "0001"),),
        order_ids=("#W0000009",),
    )
    await f.seed(
        db,
        customers=(f.customer(order_ids=("#W0000001",)), bob),
        products=(f.bottle(), f.lamp()),
        orders=(f.order("#W0000001"), f.order("#W0000009", customer_id=BOB)),
    )
    codes = IdentityCodes(db, Outbox(db, LogSender()), KEY, POLICY)
    return {t.name: t for t in build_tools(db, codes).all}


async def call(tool: BaseTool, runtime: Any, **args: Any) -> str:
    return f.text_of(await f.invoke(tool, args, runtime))


class TestTheCodeIsTheOnlyProof:
    async def test_a_lookup_shows_nothing_and_unlocks_nothing(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        rt = guest()
        result = await f.invoke(tools["find_user_id_by_email"], {"email": "bob@example.com"}, rt)
        assert not isinstance(result, Command) and f.text_of(result) == SENT
        assert await call(tools["get_user_details"], rt, user_id=BOB) == NOT_VERIFIED
        assert await call(tools["get_order_details"], rt, order_id="#W0000009") == NOT_VERIFIED
        [message] = await f.rows(db, "SELECT recipient, subject, body FROM outbox")
        assert message["recipient"] == BOB_EMAIL  # the registered address, not the typed one
        assert "valid for 10 minutes" in message["body"]

    async def test_the_emailed_code_verifies_the_conversation(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        await call(tools["find_user_id_by_email"], guest(), email="bob@example.com")
        result = await f.invoke(
            tools["confirm_identity"], {"code": await emailed_code(db, BOB_EMAIL)}, guest()
        )
        assert isinstance(result, Command)
        assert result.update["verified_user_id"] == BOB  # type: ignore[index]
        [row] = await f.rows(db, "SELECT attempts, closed_at, verified_at FROM identity_codes")
        assert row["attempts"] == 1 and row["closed_at"] and row["verified_at"]

    async def test_a_code_is_stored_only_as_a_salted_hmac(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        await call(tools["find_user_id_by_email"], guest(), email="bob@example.com")
        code = await emailed_code(db, BOB_EMAIL)
        [row] = await f.rows(db, "SELECT * FROM identity_codes")
        assert code not in json.dumps(row, default=str)
        salt, stored = bytes(row["salt"]), bytes(row["code_hash"])
        assert len(salt) == 16
        assert stored == hmac.new(KEY, salt + code.encode(), hashlib.sha256).digest()

    async def test_a_code_works_once_and_only_in_its_conversation(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        await call(tools["find_user_id_by_email"], guest("s1"), email="bob@example.com")
        code = await emailed_code(db, BOB_EMAIL)
        assert await call(tools["confirm_identity"], guest("s2"), code=code) == NO_CODE
        other_guest = guest("s1", user_id="guest-2")
        assert await call(tools["confirm_identity"], other_guest, code=code) == NO_CODE
        assert await call(tools["confirm_identity"], guest("s1"), code=code) == BOB
        assert await call(tools["confirm_identity"], guest("s1"), code=code) == NO_CODE

    async def test_five_wrong_attempts_use_the_code_up(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        await call(tools["find_user_id_by_email"], guest(), email="bob@example.com")
        code = await emailed_code(db, BOB_EMAIL)
        wrong = f"{(int(code) + 1) % 1_000_000:06d}"
        answers = [await call(tools["confirm_identity"], guest(), code=wrong) for _ in range(5)]
        assert [a.split(";")[1].split()[0] for a in answers[:4]] == ["4", "3", "2", "1"]
        assert answers[4] == NO_ATTEMPTS
        assert await call(tools["confirm_identity"], guest(), code=code) == NO_CODE

    async def test_an_expired_code_is_refused(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        await call(tools["find_user_id_by_email"], guest(), email="bob@example.com")
        code = await emailed_code(db, BOB_EMAIL)
        async with db.connection() as conn:
            await conn.execute("UPDATE identity_codes SET expires_at = now() - interval '1 s'")
        assert await call(tools["confirm_identity"], guest(), code=code) == NO_CODE

    async def test_a_new_lookup_replaces_the_code(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        await call(tools["find_user_id_by_email"], guest(), email="bob@example.com")
        first = await emailed_code(db, BOB_EMAIL)
        await call(tools["find_user_id_by_email"], guest(), email="bob@example.com")
        second = await emailed_code(db, BOB_EMAIL)
        if first != second:
            assert await call(tools["confirm_identity"], guest(), code=first) != BOB
        assert await call(tools["confirm_identity"], guest(), code=second) == BOB

    async def test_a_signed_in_customer_needs_no_code(self, tools: dict[str, BaseTool]) -> None:
        rt = f.tool_runtime(user_id=SARA, role="customer")
        assert await call(tools["find_user_id_by_email"], rt, email="sara.doe@example.com") == SARA
        assert "no code is needed" in await call(tools["confirm_identity"], rt, code="000000")


class TestNothingToEnumerate:
    async def test_known_unknown_and_ambiguous_lookups_answer_alike(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        twin = f.customer("sara_doe_2", email="twin@example.com", payment_methods=())
        await f.seed(db, customers=(twin,))
        answers = {
            await call(tools["find_user_id_by_email"], guest("a"), email="bob@example.com"),
            await call(tools["find_user_id_by_email"], guest("b"), email="nobody@example.com"),
            await call(
                tools["find_user_id_by_name_zip"],
                guest("c"),
                first_name="Sara",
                last_name="Doe",
                zip="78701",  # two customers
            ),
            await call(
                tools["find_user_id_by_name_zip"],
                guest("d"),
                first_name="Nobody",
                last_name="Here",
                zip="00000",
            ),
        }
        assert answers == {SENT}
        codes = await f.rows(db, "SELECT thread_id, customer_id FROM identity_codes ORDER BY id")
        assert [c["customer_id"] for c in codes] == [BOB, None, None, None]  # decoys for the rest
        assert [m["recipient"] for m in await f.rows(db, "SELECT * FROM outbox")] == [BOB_EMAIL]

    async def test_a_decoy_code_answers_attempts_like_a_real_one(
        self, tools: dict[str, BaseTool]
    ) -> None:
        await call(tools["find_user_id_by_email"], guest("real"), email="bob@example.com")
        await call(tools["find_user_id_by_email"], guest("decoy"), email="nobody@example.com")
        for _ in range(5):
            real = await call(tools["confirm_identity"], guest("real"), code="999999x")
            decoy = await call(tools["confirm_identity"], guest("decoy"), code="999999x")
            assert real == decoy

    async def test_too_many_lookups_by_one_guest_are_refused_whoever_they_name(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        for i in range(POLICY.per_hour):
            assert await call(tools["find_user_id_by_email"], guest(f"s{i}"), email="x@y.z") == SENT
        known = await call(tools["find_user_id_by_email"], guest("k"), email="bob@example.com")
        unknown = await call(tools["find_user_id_by_email"], guest("u"), email="x@y.z")
        assert known == unknown == TOO_MANY_CODES
        assert await f.rows(db, "SELECT * FROM outbox") == []

    async def test_a_customer_is_sent_at_most_the_hourly_number_of_codes(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool]
    ) -> None:
        """Many guests naming one customer: the answers stay alike, the emails stop."""
        for i in range(POLICY.per_hour + 2):
            rt = guest(user_id=f"guest-{i}")
            assert await call(tools["find_user_id_by_email"], rt, email="bob@example.com") == SENT
        assert len(await f.rows(db, "SELECT * FROM outbox")) == POLICY.per_hour
        codes = await f.rows(db, "SELECT customer_id FROM identity_codes ORDER BY id")
        assert [c["customer_id"] for c in codes[POLICY.per_hour :]] == [None, None]


class TestGuestOrderStatus:
    async def test_order_id_and_email_give_the_status_and_nothing_else(
        self, tools: dict[str, BaseTool]
    ) -> None:
        result = await call(
            tools["get_order_status"], guest(), order_id="#W0000009", email="BOB@example.com"
        )
        assert json.loads(result) == {"order_id": "#W0000009", "status": "pending"}

    async def test_a_wrong_email_and_an_unknown_order_read_the_same(
        self, tools: dict[str, BaseTool]
    ) -> None:
        status = tools["get_order_status"]
        wrong = await call(status, guest(), order_id="#W0000009", email="sara.doe@example.com")
        missing = await call(status, guest(), order_id="#W0000077", email="bob@example.com")
        assert wrong == missing == NO_ORDER_MATCH


class _Webhook(BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []
    status: ClassVar[int] = 200

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append({"json": json.loads(body), "auth": self.headers["Authorization"]})
        self.send_response(self.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return None


class _Smtp(socketserver.StreamRequestHandler):
    """Just enough of an SMTP server for smtplib: EHLO, MAIL, RCPT, DATA, QUIT."""

    received: ClassVar[list[bytes]] = []

    def handle(self) -> None:
        self.wfile.write(b"220 test ESMTP\r\n")
        data: list[bytes] | None = None
        while line := self.rfile.readline():
            if data is not None:
                if line == b".\r\n":
                    self.received.append(b"".join(data))
                    data = None
                    self.wfile.write(b"250 queued\r\n")
                else:
                    data.append(line)
            elif line[:4].upper() == b"DATA":
                data = []
                self.wfile.write(b"354 go ahead\r\n")
            elif line[:4].upper() == b"QUIT":
                self.wfile.write(b"221 bye\r\n")
                return
            else:
                self.wfile.write(b"250 ok\r\n")


@pytest.fixture
def webhook() -> Iterator[str]:
    _Webhook.received.clear()
    _Webhook.status = 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Webhook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/send"
    server.shutdown()
    server.server_close()


class TestSenders:
    async def test_the_webhook_sender_posts_each_message_and_the_outbox_masks_the_code(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool], webhook: str
    ) -> None:
        outbox = Outbox(db, WebhookSender(webhook, token="hook-token"))
        codes = IdentityCodes(db, outbox, KEY, POLICY)
        webhook_tools = {t.name: t for t in build_tools(db, codes).all}
        await call(webhook_tools["find_user_id_by_email"], guest(), email="bob@example.com")
        await outbox.aclose()  # waits for the delivery under way
        [sent] = _Webhook.received
        assert sent["auth"] == "Bearer hook-token"
        assert sent["json"]["to"] == BOB_EMAIL
        code = _CODE.search(sent["json"]["body"])
        assert code is not None
        [row] = await f.rows(db, "SELECT body, sent_at, failed_at FROM outbox")
        assert code.group(1) not in row["body"] and MASK in row["body"]
        assert row["sent_at"] is not None and row["failed_at"] is None
        assert await call(webhook_tools["confirm_identity"], guest(), code=code.group(1)) == BOB

    async def test_a_failed_delivery_is_marked_in_the_outbox(
        self, db: AsyncConnectionPool[Any], tools: dict[str, BaseTool], webhook: str
    ) -> None:
        _Webhook.status = 500
        outbox = Outbox(db, WebhookSender(webhook))
        codes = IdentityCodes(db, outbox, KEY, POLICY)
        webhook_tools = {t.name: t for t in build_tools(db, codes).all}
        answer = await call(
            webhook_tools["find_user_id_by_email"], guest(), email="bob@example.com"
        )
        await outbox.aclose()
        assert answer == SENT  # the guest's answer never depends on the delivery
        [row] = await f.rows(db, "SELECT sent_at, failed_at FROM outbox")
        assert row["sent_at"] is None and row["failed_at"] is not None

    async def test_the_smtp_sender_speaks_smtp(self) -> None:
        _Smtp.received.clear()
        with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Smtp) as server:
            threading.Thread(target=server.serve_forever, daemon=True).start()
            sender = SmtpSender(
                host="127.0.0.1",
                port=server.server_address[1],
                sender="shop@example.com",
                starttls=False,
            )
            await sender.send(Message("bob@example.com", "Your verification code", "Code 123456"))
            server.shutdown()
        [raw] = _Smtp.received
        assert b"To: bob@example.com" in raw and b"Code 123456" in raw


@pytest.fixture(scope="module")
def server(database_url: str, scripted_model_session: ScriptedModelServer) -> Iterator[LiveServer]:
    settings = Settings(database_url=database_url, app_env="dev", _env_file=None)  # type: ignore[call-arg]
    with live_server(settings, scripted_model_session) as live:
        yield live


@pytest.fixture
async def client(
    server: LiveServer, db: AsyncConnectionPool[Any]
) -> AsyncIterator[httpx.AsyncClient]:
    await load_small_shop(db)
    async with server.client() as c:
        yield c


NOAH, NOAH_EMAIL = "noah_brown_6181", "noah.brown7922@example.com"


class TestThroughTheService:
    async def test_a_guest_is_verified_by_the_emailed_code_and_only_then_served(
        self,
        client: httpx.AsyncClient,
        server: LiveServer,
        model_server: ScriptedModelServer,
        db: AsyncConnectionPool[Any],
    ) -> None:
        g = server.headers("guest-svc", role="guest")
        model_server.use(
            Script(
                [
                    Reply.call("find_user_id_by_email", email=NOAH_EMAIL),
                    Reply.call("get_user_details", user_id=NOAH),
                    Reply.say("I have emailed you a code; please type it here."),
                ]
            )
        )
        first = (
            await client.post("/threads/v1/messages", json={"content": NOAH_EMAIL}, headers=g)
        ).json()
        lookup, details = [m for m in first["messages"] if m["role"] == "tool"]
        assert lookup["content"] == SENT
        assert details["content"] == NOT_VERIFIED
        state = (await client.get("/threads/v1/state", headers=g)).json()
        assert state["verified_user_id"] is None

        # dev: the page shows the guest what went out for its conversations, and nobody else
        [sent] = (await client.get("/me/outbox", headers=g)).json()
        code = await emailed_code(db, NOAH_EMAIL)
        assert sent["recipient"] == NOAH_EMAIL and code in sent["body"]
        assert sent["session_id"] == "v1"
        other = server.headers("guest-other", role="guest")
        assert (await client.get("/me/outbox", headers=other)).json() == []

        model_server.use(
            Script(
                [
                    Reply.call("confirm_identity", code=code),
                    Reply.call("get_user_details", user_id=NOAH),
                    Reply.say("Thanks, you are verified."),
                ]
            )
        )
        second = (
            await client.post("/threads/v1/messages", json={"content": code}, headers=g)
        ).json()
        confirmed, details = [m for m in second["messages"] if m["role"] == "tool"][-2:]
        assert confirmed["content"] == NOAH
        assert details["content"].startswith(f"Customer {NOAH}: Noah Brown")
        state = (await client.get("/threads/v1/state", headers=g)).json()
        assert state["verified_user_id"] == NOAH
        assert "customer is verified: user id noah_brown_6181" in (
            model_server.requests[-1].system_prompt or ""
        )
