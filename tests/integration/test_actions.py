"""Your own actions, end to end with real processes: the service (`python -m app serve`, under
uvicorn, on its own database), a real MCP server built with the `mcp` SDK ("loyalty") and a
real HTTP server with an OpenAPI document ("billing"), each a process of its own
(tests/integration/actions_servers.py), and the scripted model making the agent call them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from app.actions.calls import NO_ANSWER, OUTCOME_UNKNOWN, SOURCE_DOWN, SOURCE_FAILED
from app.api.auth import issue_token
from app.identity import Role
from tests.fakellm import ChatRequest, Reply, ScriptedModelServer
from tests.faults import procs
from tests.integration.actions_servers import BILLING_SECRET, LOYALTY_SECRET
from tests.pg import create_fresh_database, drop_database

JWT_SECRET = "actions-test-secret-actions-test-secret-0123"
CALL = re.compile(r"^call (\w+) (\{.*\})(?: times (\d+))?$")


class ActionsPolicy:
    """`call TOOL {json args} [times N]`: calls the tool (N times, one after the other),
    then answers `RESULT ` and the results, joined by ` | `. Anything else: `ok`."""

    def __call__(self, request: ChatRequest) -> Reply:
        messages = request.messages
        last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
        results = [m for m in messages[last_user:] if m.get("role") == "tool"]
        match = CALL.match(request.last_user_text().strip())
        if match is None:
            return Reply.say("ok " + " | ".join(str(m.get("content")) for m in results))
        if len(results) < int(match.group(3) or 1):
            return Reply.call(match.group(1), **json.loads(match.group(2)))
        return Reply.say("RESULT " + " | ".join(str(m.get("content")) for m in results))


class Server:
    """One of the test's own servers, as a process."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind, self.port = kind, procs.free_port()
        self.log = root / f"{kind}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(procs.APP_ROOT)}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.integration.actions_servers",
                    self.kind,
                    "--port",
                    str(self.port),
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(self.url + "/_seen", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(self.log.read_text())

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)

    def seen(self) -> list[dict[str, Any]]:
        return list(httpx.get(self.url + "/_seen", timeout=5).json()["seen"])

    def applied(self) -> list[dict[str, Any]]:
        return list(httpx.get(self.url + "/_seen", timeout=5).json()["applied"])

    def mode(self, mode: str) -> None:
        httpx.post(self.url + "/_mode", json={"mode": mode}, timeout=5).raise_for_status()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("actions")


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    url, admin = create_fresh_database("csagent_actions")
    env = {**os.environ, "DATABASE_URL": url, "PYTHONPATH": str(procs.APP_ROOT)}
    subprocess.run(
        [sys.executable, "-m", "app", "migrate"], env=env, check=True, capture_output=True
    )
    yield url
    drop_database(admin, url)


@pytest.fixture(scope="module")
def loyalty(root: Path) -> Iterator[Server]:
    server = Server("mcp", root)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def billing(root: Path) -> Iterator[Server]:
    server = Server("openapi", root)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(ActionsPolicy(), record=False) as server:
        yield server


def actions_file(root: Path, loyalty: Server, billing: Server, down_port: int) -> Path:
    path = root / "actions.yaml"
    path.write_text(
        f"""
sources:
  - name: loyalty
    mcp: {loyalty.url}/mcp
    headers: {{Authorization: "Bearer ${{LOYALTY_TOKEN}}"}}
    identity_secret: ${{LOYALTY_IDENTITY_SECRET}}
    customer_argument: customer_id
    timeout_s: 8
    tools:
      issue_voucher: {{confirm: "Issue a voucher of {{amount}} to your account"}}
  - name: billing
    openapi: {billing.url}/openapi.json
    base_url: {billing.url}
    operations: [getInvoice, createRefundRequest]
    identity_secret: ${{BILLING_IDENTITY_SECRET}}
    customer_argument: customer_id
    timeout_s: 1.5
    tools:
      createRefundRequest: {{idempotent: true}}
  - name: warehouse
    mcp: http://127.0.0.1:{down_port}/mcp
    tools:
      stock_level: {{kind: read}}
""",
        encoding="utf-8",
    )
    return path


def service_env(database: str, model: ScriptedModelServer, file: Path) -> dict[str, str]:
    return {
        "DATABASE_URL": database,
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "test",
        "LLM_MODEL": "gpt-4o-mini",
        "LLM_PROVIDER": "openai",
        "LLM_MAX_RETRIES": "0",
        "JWT_SECRET": JWT_SECRET,
        "THREAD_LEASE_TTL_S": "2",
        "ACTIONS_FILE": str(file),
        "LOYALTY_TOKEN": "loyalty-service-token",
        "LOYALTY_IDENTITY_SECRET": LOYALTY_SECRET,
        "BILLING_IDENTITY_SECRET": BILLING_SECRET,
    }


@pytest.fixture(scope="module")
def env(
    root: Path, database: str, model: ScriptedModelServer, loyalty: Server, billing: Server
) -> dict[str, str]:
    return service_env(database, model, actions_file(root, loyalty, billing, procs.free_port()))


@pytest.fixture(scope="module")
def service(env: dict[str, str], root: Path) -> Iterator[procs.ServiceProcess]:
    with procs.ServiceProcess(env, log_dir=root) as svc:
        yield svc


def headers(user_id: str, role: Role = "customer") -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(JWT_SECRET, user_id, role=role)}"}


_sessions = iter(range(10_000))


class Chat:
    def __init__(self, service: procs.ServiceProcess, user: str, role: Role = "customer") -> None:
        self.base = service.url + f"/threads/s{next(_sessions)}"
        self.thread = f"{user}:{self.base.rsplit('/', 1)[1]}"
        self.headers = headers(user, role)
        self.n = 0

    def say(self, text: str) -> dict[str, Any]:
        self.n += 1
        body = {"content": text, "client_message_id": f"m{self.n}"}
        return post(self.base + "/messages", body, self.headers)

    def decide(self, decision: str) -> dict[str, Any]:
        return post(self.base + "/resume", {"decision": decision}, self.headers)


def post(url: str, body: dict[str, Any], hdrs: dict[str, str]) -> dict[str, Any]:
    """A client's post; after a crash it retries while the dead process's lease runs out."""
    deadline = time.monotonic() + 30
    while True:
        response = httpx.post(url, json=body, headers=hdrs, timeout=60)
        if response.status_code != 409 or time.monotonic() > deadline:
            assert response.status_code == 200, response.text
            return dict(response.json())
        time.sleep(0.3)


def answer(result: dict[str, Any]) -> str:
    said = [m for m in result["messages"] if m["role"] == "assistant" and not m.get("tool_calls")]
    return str(said[-1]["content"])


def ledger(database: str, thread: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database) as conn:
        return conn.execute(
            "SELECT tool_name, state, ok, idempotency_key, attempts FROM tool_executions"
            " WHERE thread_id = %s ORDER BY created_at",
            (thread,),
        ).fetchall()


class TestReads:
    def test_an_mcp_read_is_sent_with_the_customers_token_and_their_own_id(
        self, service: procs.ServiceProcess, loyalty: Server
    ) -> None:
        before = len(loyalty.seen())
        chat = Chat(service, "cust_reader")
        result = chat.say('call get_points {"customer_id": "cust_someone_else"}')
        assert result["status"] == "completed"
        assert '"points":1200' in answer(result)
        seen = loyalty.seen()[before:]
        assert len(seen) == 1
        call = seen[0]
        assert call["args"] == {"customer_id": "cust_reader"}  # the model's id overridden
        assert call["key"] is None  # reads carry no key
        assert call["token"]["valid"] and call["token"]["sub"] == "cust_reader"
        assert call["token"]["ttl"] <= 300
        assert call["authorization"] == "Bearer loyalty-service-token"  # the file's header
        assert ledger(service_db(service), chat.thread) == []  # reads are not in the ledger

    def test_an_openapi_read_fills_its_query_from_the_customer(
        self, service: procs.ServiceProcess, billing: Server
    ) -> None:
        before = len(billing.seen())
        chat = Chat(service, "cust_payer")
        result = chat.say('call getInvoice {"invoice_id": "INV-7", "customer_id": "cust_x"}')
        assert '"total":42.5' in answer(result)
        (call,) = billing.seen()[before:]
        assert call["args"] == {"invoice_id": "INV-7", "customer_id": "cust_payer"}
        assert call["key"] is None
        assert call["token"]["valid"] and call["token"]["sub"] == "cust_payer"
        assert call["authorization"] is None  # the customer's bearer is never forwarded

    def test_calls_reuse_the_session_and_the_connection(
        self, service: procs.ServiceProcess, loyalty: Server, billing: Server
    ) -> None:
        seen_mcp, seen_http = len(loyalty.seen()), len(billing.seen())
        chat = Chat(service, "cust_again")
        for i in range(3):
            chat.say(f'call get_points {{"customer_id": "c{i}"}}')
            chat.say(f'call getInvoice {{"invoice_id": "INV-{i}"}}')
        mcp_ports = {s["port"] for s in loyalty.seen()[seen_mcp:]}
        http_ports = {s["port"] for s in billing.seen()[seen_http:]}
        assert len(mcp_ports) == 1 and len(http_ports) == 1  # one kept-alive connection each

    def test_a_server_refusal_reaches_the_model_as_its_reason(
        self, service: procs.ServiceProcess
    ) -> None:
        result = Chat(service, "cust_payer").say('call getInvoice {"invoice_id": "missing"}')
        assert "getInvoice was refused" in answer(result)
        assert "no such invoice" in answer(result)


def service_db(service: procs.ServiceProcess) -> str:
    return service.env["DATABASE_URL"]


class TestWrites:
    def test_an_mcp_write_asks_first_then_sends_once_with_its_key(
        self, service: procs.ServiceProcess, loyalty: Server
    ) -> None:
        before = len(loyalty.seen())
        chat = Chat(service, "cust_writer")
        paused = chat.say('call issue_voucher {"amount": 25}')
        assert paused["status"] == "interrupted"
        (pending,) = paused["pending"]
        assert pending["summary"] == "Issue a voucher of 25 to your account"
        assert len(loyalty.seen()) == before  # nothing sent before the customer's yes
        done = chat.decide("approve")
        assert done["status"] == "completed"
        assert '"voucher_id"' in answer(done)
        (call,) = loyalty.seen()[before:]
        rows = ledger(service_db(service), chat.thread)
        assert [(r[0], r[1], r[2]) for r in rows] == [("issue_voucher", "done", True)]
        assert call["key"] == rows[0][3]  # the ledger's key, in _meta
        assert call["args"] == {"customer_id": "cust_writer", "amount": 25}
        assert call["token"]["valid"] and call["token"]["sub"] == "cust_writer"

    def test_a_declined_write_sends_nothing(
        self, service: procs.ServiceProcess, loyalty: Server
    ) -> None:
        before = len(loyalty.seen())
        chat = Chat(service, "cust_decliner")
        assert chat.say('call redeem_points {"points": 100}')["status"] == "interrupted"
        declined = chat.decide("reject")
        assert declined["status"] == "completed"
        assert len(loyalty.seen()) == before
        assert ledger(service_db(service), chat.thread) == []

    def test_an_openapi_write_carries_the_idempotency_key_header(
        self, service: procs.ServiceProcess, billing: Server
    ) -> None:
        before = len(billing.seen())
        chat = Chat(service, "cust_refund")
        paused = chat.say('call createRefundRequest {"invoice_id": "INV-9", "amount": 12.5}')
        (pending,) = paused["pending"]
        assert pending["summary"] == (
            "Run createRefundRequest (billing) with invoice_id=INV-9, amount=12.5"
        )
        assert len(billing.seen()) == before
        done = chat.decide("approve")
        assert '"refund_request_id"' in answer(done)
        (call,) = billing.seen()[before:]
        rows = ledger(service_db(service), chat.thread)
        assert call["key"] == rows[0][3] and rows[0][1] == "done"
        assert call["args"] == {"invoice_id": "INV-9", "amount": 12.5, "customer_id": "cust_refund"}
        with psycopg.connect(service_db(service)) as conn:
            audit = conn.execute(
                "SELECT tool_name, ok FROM audit_log WHERE thread_id = %s", (chat.thread,)
            ).fetchall()
        assert audit == [("createRefundRequest", True)]


class TestIdentity:
    def test_a_guest_is_refused_before_any_request(
        self, service: procs.ServiceProcess, loyalty: Server
    ) -> None:
        before = len(loyalty.seen())
        result = Chat(service, "guest-abc", "guest").say('call get_points {"customer_id": "c1"}')
        assert "identity is not verified" in answer(result)
        assert len(loyalty.seen()) == before

    def test_the_model_does_not_see_the_customer_argument(
        self, service: procs.ServiceProcess, model: ScriptedModelServer
    ) -> None:
        model.use(ActionsPolicy())
        model.engine.record = True
        try:
            Chat(service, "cust_schema").say("hello")
            tools = {t["function"]["name"]: t["function"] for t in model.requests[-1].tools or []}
        finally:
            model.engine.record = False
        assert "customer_id" not in tools["get_points"]["parameters"].get("properties", {})
        assert set(tools["createRefundRequest"]["parameters"]["properties"]) == {
            "invoice_id",
            "amount",
        }
        assert tools["get_points"]["description"] == "The loyalty points balance of a customer."


class TestMisbehaving:
    def test_a_source_down_at_start_is_down_in_readyz_and_fails_plainly(
        self, service: procs.ServiceProcess
    ) -> None:
        ready = httpx.get(service.url + "/readyz", timeout=10)
        assert ready.status_code == 200
        assert ready.json()["sources"] == {"loyalty": "ok", "billing": "ok", "warehouse": "down"}
        result = Chat(service, "cust_stock").say('call stock_level {"sku": "A1"}')
        assert SOURCE_DOWN in answer(result)

    def test_a_500_gives_a_fixed_observation_and_opens_the_breaker(
        self, service: procs.ServiceProcess, billing: Server
    ) -> None:
        chat = Chat(service, "cust_500")
        billing.mode("fail")
        try:
            answers = [chat.say(f'call getInvoice {{"invoice_id": "I{i}"}}') for i in range(3)]
            before = len(billing.seen())
            refused = chat.say('call getInvoice {"invoice_id": "I9"}')
        finally:
            billing.mode("normal")
        assert [answer(a) for a in answers] == ["RESULT " + SOURCE_FAILED] * 3
        assert "temporarily unavailable" in answer(refused)  # three failures opened it
        assert len(billing.seen()) == before  # the breaker sent nothing

    def test_a_slow_server_times_out_with_a_fixed_observation(
        self, service: procs.ServiceProcess, billing: Server
    ) -> None:
        billing.mode("slow")
        try:
            result = Chat(service, "cust_slow").say('call getInvoice {"invoice_id": "I2"}')
        finally:
            billing.mode("normal")
        assert answer(result) == "RESULT " + NO_ANSWER

    def test_a_source_that_goes_down_is_reported_down_and_the_service_stays_ready(
        self, service: procs.ServiceProcess, billing: Server
    ) -> None:
        billing.stop()
        try:
            result = Chat(service, "cust_gone").say('call getInvoice {"invoice_id": "I3"}')
            assert answer(result) == "RESULT " + SOURCE_DOWN
            ready = httpx.get(service.url + "/readyz", timeout=10)
            assert ready.status_code == 200 and ready.json()["sources"]["billing"] == "down"
        finally:
            billing.start()  # on the same port
        wait_until(
            lambda: (
                httpx.get(service.url + "/readyz", timeout=10).json()["sources"]["billing"] == "ok"
            ),
            "billing to be ok again",
        )

    def test_an_mcp_server_that_dies_mid_session_fails_fast_and_is_reopened(
        self, service: procs.ServiceProcess, loyalty: Server
    ) -> None:
        chat = Chat(service, "cust_reopen")
        assert '"points":1200' in answer(chat.say('call get_points {"customer_id": "x"}'))
        loyalty.stop()
        try:
            started = time.monotonic()
            result = chat.say('call get_points {"customer_id": "y"}')
            assert answer(result) == "RESULT " + SOURCE_DOWN
            assert time.monotonic() - started < 8  # refused at once, not after timeout_s
            ready = httpx.get(service.url + "/readyz", timeout=10)
            assert ready.status_code == 200 and ready.json()["sources"]["loyalty"] == "down"
        finally:
            loyalty.start()
        again = chat.say('call get_points {"customer_id": "z"}')  # a new session, by itself
        assert '"points":1200' in answer(again)
        assert httpx.get(service.url + "/readyz", timeout=10).json()["sources"]["loyalty"] == "ok"


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def approve_in_background(chat: Chat) -> None:
    def run() -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(
                chat.base + "/resume",
                json={"decision": "approve"},
                headers=chat.headers,
                timeout=60,
            )

    threading.Thread(target=run, daemon=True).start()


class TestCrashWhileAWriteIsInFlight:
    """kill -9 of the service while the server holds a write's response."""

    def test_an_idempotent_write_is_resent_with_its_key_and_applied_once(
        self, env: dict[str, str], root: Path, loyalty: Server, service: procs.ServiceProcess
    ) -> None:
        self._crash(env, root, loyalty, 'call issue_voucher {"amount": 7}')
        (held,) = self.applied_now
        seen = [s for s in loyalty.seen() if s["key"] == held["key"]]
        assert len(seen) == 2  # sent, and after the crash resent with the same key
        assert [a for a in loyalty.applied() if a["key"] == held["key"]] == [held]  # once
        rows = ledger(env["DATABASE_URL"], self.chat.thread)
        assert [(r[1], r[2], r[4]) for r in rows] == [("done", True, 2)]

    def test_a_non_idempotent_write_is_never_resent_and_the_thread_is_queued(
        self, env: dict[str, str], root: Path, loyalty: Server, service: procs.ServiceProcess
    ) -> None:
        self._crash(env, root, loyalty, 'call redeem_points {"points": 300}')
        (held,) = self.applied_now
        assert len([s for s in loyalty.seen() if s["key"] == held["key"]]) == 1
        rows = ledger(env["DATABASE_URL"], self.chat.thread)
        assert [(r[1], r[2]) for r in rows] == [("unknown", False)]
        assert OUTCOME_UNKNOWN in self.after["messages"][0]["content"] or any(
            OUTCOME_UNKNOWN in m["content"] for m in self.after["messages"]
        )
        with psycopg.connect(env["DATABASE_URL"]) as conn:
            control, reason, summary = conn.execute(
                "SELECT control, control_reason, control_summary FROM thread_leases"
                " WHERE thread_id = %s",
                (self.chat.thread,),
            ).fetchone() or (None, None, None)
        assert (control, reason) == ("queued", "write_outcome_unknown")
        assert "redeem_points" in summary and held["key"] in summary

    def _crash(self, env: dict[str, str], root: Path, loyalty: Server, message: str) -> None:
        applied_before = len(loyalty.applied())
        with procs.ServiceProcess(env, log_dir=root) as first:
            self.chat = Chat(first, "cust_crash")
            assert self.chat.say(message)["status"] == "interrupted"
            loyalty.mode("hold")
            try:
                approve_in_background(self.chat)
                wait_until(lambda: len(loyalty.applied()) > applied_before, "the write to land")
                first.kill9()
            finally:
                loyalty.mode("normal")
        self.applied_now = loyalty.applied()[applied_before:]
        with procs.ServiceProcess(env, log_dir=root) as second:
            self.chat.base = second.url + "/" + self.chat.base.split("/", 3)[3]
            self.after = self.chat.say("how is it going?")


class TestUnknownWithoutACrash:
    def test_a_non_idempotent_write_that_times_out_is_not_resent_and_goes_to_a_person(
        self, service: procs.ServiceProcess, loyalty: Server
    ) -> None:
        applied_before = len(loyalty.applied())
        chat = Chat(service, "cust_timeout")
        assert chat.say('call redeem_points {"points": 50}')["status"] == "interrupted"
        loyalty.mode("hold")
        try:
            done = chat.decide("approve")  # the server never answers: timeout_s (8 s)
        finally:
            loyalty.mode("normal")
        assert answer(done) == "RESULT " + OUTCOME_UNKNOWN
        (held,) = loyalty.applied()[applied_before:]
        assert len([s for s in loyalty.seen() if s["key"] == held["key"]]) == 1
        with psycopg.connect(service_db(service)) as conn:
            row = conn.execute(
                "SELECT control, control_reason FROM thread_leases WHERE thread_id = %s",
                (chat.thread,),
            ).fetchone()
        assert row == ("queued", "write_outcome_unknown")
        self._outcome_is_flagged(service_db(service), chat.thread)

    def _outcome_is_flagged(self, database: str, thread: str) -> None:
        subprocess.run(
            [sys.executable, "-m", "app", "outcomes", "refresh", "--idle-min", "0"],
            env={**os.environ, "DATABASE_URL": database, "PYTHONPATH": str(procs.APP_ROOT)},
            check=True,
            capture_output=True,
            timeout=120,
        )
        with psycopg.connect(database) as conn:
            got = conn.execute(
                "SELECT result, handoff_reason, flags FROM conversation_outcomes"
                " WHERE thread_id = %s",
                (thread,),
            ).fetchone()
        assert got is not None
        result, reason, flags = got
        assert (result, reason) == ("handed_off", "write_outcome_unknown")
        assert {
            "code": "write_outcome_unknown",
            "reason": "redeem_points was sent in turn 1 and its outcome is unknown; "
            "a person checks it.",
        } in flags


class TestCli:
    def test_check_reports_each_source_and_fails_while_one_is_down(
        self, env: dict[str, str], root: Path
    ) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "app", "actions", "check"],
            env={**os.environ, **env, "PYTHONPATH": str(procs.APP_ROOT)},
            capture_output=True,
            text=True,
            cwd=root,
            timeout=60,
        )
        assert done.returncode == 1, done.stderr
        sources = ("loyalty", "billing", "warehouse")
        lines = {
            line.split()[0]: line.split()[1:3]
            for line in done.stdout.splitlines()
            if line.split()[:1] and line.split()[0] in sources  # not the log's lines
        }
        assert lines == {
            "loyalty": ["ok", "3"],
            "billing": ["ok", "2"],
            "warehouse": ["down", "1"],
        }

    def test_list_prints_each_tool_with_its_kind_and_confirmation(
        self, env: dict[str, str], root: Path
    ) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "app", "actions", "list"],
            env={**os.environ, **env, "PYTHONPATH": str(procs.APP_ROOT)},
            capture_output=True,
            text=True,
            cwd=root,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        rows = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line}
        assert rows["get_points"][1:4] == ["loyalty", "read", "no"]
        assert rows["issue_voucher"][1:4] == ["loyalty", "write", "yes"]
        assert " ".join(rows["issue_voucher"][4:]) == "Issue a voucher of {amount} to your account"
        assert rows["redeem_points"][1:4] == ["loyalty", "write", "no"]
        assert rows["createRefundRequest"][1:4] == ["billing", "write", "yes"]
        assert rows["getInvoice"][1:4] == ["billing", "read", "no"]


class TestPage:
    def test_the_page_gets_the_labels_of_remote_tools(self, service: procs.ServiceProcess) -> None:
        labels = httpx.get(service.url + "/tool-labels", timeout=10).json()["labels"]
        assert labels["get_points"] == {"label": "Checking your points"}  # the MCP title
        assert labels["getInvoice"] == {"label": "Look up an invoice of the customer."}
        assert labels["redeem_points"] == {"label": "Using redeem_points …"}
        assert "cancel_pending_order" not in labels  # the built-in ones are in tool-labels.js
