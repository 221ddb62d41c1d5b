"""What the channels read from what they are sent: Chatwoot's signature and events, an
email's reply text, threading and robot marks, and a plain yes or no."""

from __future__ import annotations

import time
from email.message import EmailMessage
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.channels.chatwoot import classify, signature_ok
from app.channels.mail_parse import auto_reason, from_postmark, from_rfc822, reply_text
from app.channels.turns import decision_in
from tests.integration.chatwoot_standin import incoming_event, sign

SECRET = "s3cret"


class TestChatwootSignature:
    def test_the_signature_of_timestamp_dot_body_passes(self) -> None:
        stamp, body = str(int(time.time())), b'{"event":"message_created"}'
        assert signature_ok(SECRET, stamp, sign(SECRET, stamp, body), body)

    def test_a_wrong_secret_a_changed_body_or_a_stale_timestamp_fails(self) -> None:
        stamp, body = str(int(time.time())), b"{}"
        good = sign(SECRET, stamp, body)
        assert not signature_ok(SECRET, stamp, sign("other", stamp, body), body)
        assert not signature_ok(SECRET, stamp, good, b"{ }")
        old = str(int(time.time()) - 301)
        assert not signature_ok(SECRET, old, sign(SECRET, old, body), body)
        assert not signature_ok(SECRET, stamp, good.removeprefix("sha256="), body)
        assert not signature_ok(SECRET, None, good, body)
        assert not signature_ok(SECRET, "soon", good, body)


class TestChatwootEvents:
    def test_an_incoming_public_message_is_a_message_of_its_conversation(self) -> None:
        event = classify(incoming_event(1, 7, 42, "hi", "cust_1", True, 5), None)
        assert event is not None and event.kind == "message"
        assert event.conversation_key == "1/7" and event.delivery_key == "message:42"
        assert event.body["contact"] == {"id": 5, "identifier": "cust_1", "verified": True}
        assert classify(incoming_event(1, 7, 42, "hi", None, False, 5), "d-9") is not None

    def test_outgoing_private_activity_and_empty_messages_are_ignored(self) -> None:
        base = incoming_event(1, 7, 42, "hi", None, False, 5)
        assert classify({**base, "message_type": "outgoing"}, None) is None
        assert classify({**base, "message_type": "activity"}, None) is None
        assert classify({**base, "private": True}, None) is None
        assert classify({**base, "content": "  "}, None) is None
        assert classify({**base, "event": "webwidget_triggered"}, None) is None

    def test_a_choice_on_our_input_select_is_a_decision(self) -> None:
        chosen = {
            "event": "message_updated",
            "id": 50,
            "content_type": "input_select",
            "content_attributes": {"submitted_values": [{"title": "Decline", "value": "reject"}]},
            "account": {"id": 1},
            "conversation": {"id": 7},
        }
        event = classify(chosen, None)
        assert event is not None and event.kind == "decision"
        assert event.body["decision"] == "reject"
        again = classify(chosen, "another-delivery")  # a later update of the same message
        assert again is not None and again.delivery_key == event.delivery_key
        assert classify({**chosen, "content_attributes": {}}, None) is None

    def test_only_a_pending_status_hands_the_conversation_back(self) -> None:
        status = {"event": "conversation_status_changed", "id": 7, "account": {"id": 1}}
        released = classify({**status, "status": "pending"}, "d-1")
        assert released is not None and released.kind == "release"
        assert classify({**status, "status": "open"}, "d-2") is None  # our own handoff
        assert classify({**status, "event": "conversation_opened", "status": "open"}, None) is None


class TestEmail:
    def test_the_reply_loses_its_quoted_history_and_signature(self) -> None:
        body = "Yes please.\n\n-- \nNoah\n\nOn Mon, 1 Jan, Support wrote:\n> Shall I?\n"
        assert reply_text(body) == "Yes please."
        assert reply_text("Ok\n> old\n> older\nthanks") == "Ok\nthanks"
        assert reply_text("Fine\n-----Original Message-----\nFrom: x") == "Fine"

    def test_robots_are_recognised(self) -> None:
        assert auto_reason({"Auto-Submitted": "auto-replied"}, "a@b.c", None) == "auto-submitted"
        assert auto_reason({"Auto-Submitted": "no"}, "a@b.c", None) is None
        assert auto_reason({"Precedence": "bulk"}, "a@b.c", None) == "precedence"
        assert auto_reason({"List-Id": "<x>"}, "a@b.c", None) == "automatic"
        assert auto_reason({}, "support@shop.example", "Support@Shop.example") == "own_address"
        assert auto_reason({}, "mailer-daemon@x.org", None) == "bounce"
        assert auto_reason({}, "a@b.c", "support@shop.example") is None

    def test_a_message_names_its_thread_and_carries_its_token(self) -> None:
        mail = EmailMessage()
        mail["From"] = "Noah <Noah@Example.com>"
        mail["Subject"] = "Re: My order [confirm abcdefghijklmnop1234]"
        mail["Message-ID"] = "<m3@x>"
        mail["In-Reply-To"] = "<ours@shop>"
        mail["References"] = "<m1@x> <ours@shop>"
        mail.set_content("YES")
        mail.add_attachment(b"%PDF", maintype="application", subtype="pdf", filename="bill.pdf")
        parsed = from_rfc822(bytes(mail), "support@shop.example")
        assert parsed.sender == "noah@example.com" and parsed.message_id == "<m3@x>"
        assert parsed.thread_refs == ["<ours@shop>", "<m1@x>"]
        assert parsed.text == "YES" and parsed.attachments == ["bill.pdf"]
        assert parsed.token == "abcdefghijklmnop1234" and parsed.auto is None

    def test_postmark_json_reads_as_the_same_message(self) -> None:
        parsed = from_postmark(
            {
                "FromFull": {"Email": "noah@example.com"},
                "Subject": "Hello",
                "TextBody": "Hi\n\nOn Mon, x wrote:\n> old",
                "Headers": [
                    {"Name": "Message-ID", "Value": "<p1@x>"},
                    {"Name": "In-Reply-To", "Value": "<ours@shop>"},
                ],
                "Attachments": [{"Name": "a.png"}],
            },
            None,
        )
        assert parsed.message_id == "<p1@x>" and parsed.in_reply_to == ["<ours@shop>"]
        assert parsed.text == "Hi" and parsed.attachments == ["a.png"]


class TestDecisions:
    def test_a_plain_yes_or_no_only(self) -> None:
        assert decision_in("YES") == decision_in(" yes! ") == decision_in("Approve") == "approve"
        assert decision_in("no") == decision_in("Decline.") == "reject"
        assert decision_in("yes but change the address") is None
        assert decision_in("") is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
KEYS = st.sampled_from(
    ["event", "id", "content", "message_type", "private", "account", "conversation", "sender",
     "attachments", "messages", "status", "content_type", "content_attributes", "account_id"]
)  # fmt: skip
EVENTS = st.sampled_from(
    ["message_created", "message_updated", "conversation_status_changed", "conversation_opened"]
)


class TestAnyPayload:
    """Whatever a signed sender puts in its JSON, reading it never raises (a 5xx)."""

    @settings(max_examples=300, deadline=None)
    @given(st.dictionaries(KEYS, JSON, max_size=8), EVENTS)
    def test_chatwoot_events(self, payload: dict[str, Any], event: str) -> None:
        base = incoming_event(1, 7, 42, "hi", None, False, 5)
        classify({**payload, "event": event}, None)
        classify({**base, **payload, "event": event}, "d")
        conversation = {**base["conversation"], **payload}
        classify({**base, "conversation": conversation, "event": event}, "d")

    @settings(max_examples=300, deadline=None)
    @given(
        st.dictionaries(
            st.sampled_from(["From", "FromFull", "Subject", "TextBody", "StrippedTextReply",
                             "Headers", "Attachments", "MessageID"]),
            JSON,
            max_size=8,
        )
    )  # fmt: skip
    def test_postmark_json(self, data: dict[str, Any]) -> None:
        from_postmark(data, "support@shop.example")
