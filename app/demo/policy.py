"""The demo model's behaviour: read the conversation, call a tool or answer.

Deterministic and stateless. It never raises: anything unexpected becomes a polite reply,
so no exception text ever reaches the customer.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from app.demo import answers
from app.demo.address import parse_address
from app.demo.chat import ChatRequest, Reply
from app.demo.conversation import Conversation, Result, Task
from app.demo.parsing import (
    NEEDS_IDENTITY,
    code_in,
    distance_in,
    email_in,
    help_query_of,
    item_ids_in,
    order_id_in,
    reason_in,
    wants_everything,
    weight_in,
)
from app.demo.reading import field_of, order_of
from app.demo.texts import Lang, say

log = structlog.get_logger(__name__)

MAX_CALLS_PER_TURN = 6
MAX_SUMMARY = 300


class DemoPolicy:
    """Decides each reply of the demo model (model.py); share one instance between all
    conversations."""

    def __call__(self, request: ChatRequest) -> Reply:
        lang: Lang = "en"
        try:
            conversation = Conversation(request)
            lang = conversation.lang
            return _guarded(conversation, _decide(conversation))
        except Exception as error:
            log.warning("demo policy failed", error_type=type(error).__name__)
            return Reply.say(say("confused", lang))


def _guarded(conversation: Conversation, reply: Reply) -> Reply:
    """Tool calls the conversation cannot take become answers: no tools offered, a tool
    this app does not have, the same call twice in a turn, or too many calls."""
    if not reply.tool_calls:
        return reply
    lang = conversation.lang
    if not conversation.may_call_tools:
        return Reply.say(say("cannot_now", lang))
    earlier = conversation.current_calls
    if len(earlier) >= MAX_CALLS_PER_TURN:
        return Reply.say(say("cannot_now", lang))
    for call in reply.tool_calls:
        if call.name not in conversation.tool_names:
            return Reply.say(say("demo", lang))
        if any(c.name == call.name and c.args == call.arguments for c in earlier):
            results = conversation.pending
            text = answers.found(results[-1], lang) if results else say("cannot_now", lang)
            return Reply.say(text)
    return reply


def _decide(conversation: Conversation) -> Reply:
    if conversation.pending:
        return _after_tools(conversation)
    return _on_message(conversation)


def _on_message(conversation: Conversation) -> Reply:
    lang = conversation.lang
    if conversation.handed_off:
        return Reply.say(say("handed_off", lang))
    code = code_in(conversation.last_text)
    if code and conversation.awaiting_code:
        return Reply.call("confirm_identity", code=code)
    task = conversation.task()
    if task is None:
        email = email_in(conversation.last_text)
        if conversation.is_guest and email:
            return Reply.call("find_user_id_by_email", email=email)
        return Reply.say(say("demo", lang))
    if task.intent in NEEDS_IDENTITY and conversation.is_guest:
        return _identify(task, conversation)
    return _run(task, conversation)


def _identify(task: Task, conversation: Conversation) -> Reply:
    """A guest: an order's status from its id and email alone, as a tracking page gives it;
    anything else waits for the code emailed to the customer."""
    email, order_id = task.find(email_in), task.find(order_id_in)
    if task.intent == "status" and email and order_id:
        return Reply.call("get_order_status", order_id=order_id, email=email)
    if conversation.awaiting_code and not email_in(conversation.last_text):
        return Reply.say(say("ask_code", conversation.lang))
    if email:
        return Reply.call("find_user_id_by_email", email=email)
    return Reply.say(say("ask_email", conversation.lang))


def _run(task: Task, conversation: Conversation) -> Reply:
    lang = conversation.lang
    intent = task.intent
    if intent in ("greeting", "help"):
        note = say("guest_note", lang) if conversation.is_guest else ""
        return Reply.say(say("greeting", lang) + note)
    if intent == "orders":
        return Reply.call("get_user_details", user_id=conversation.verified_user_id)
    if intent == "shipping":
        weight, distance = task.find(weight_in), task.find(distance_in)
        if weight is None or distance is None:
            return Reply.say(say("ask_shipping", lang))
        return Reply.call(
            "calc_shipping",
            distance_km=answers.number(distance),
            weight_kg=answers.number(weight),
        )
    if intent == "policy":
        return Reply.call("search_help_center", query=help_query_of(task.opening))
    if intent == "human":
        return Reply.call("transfer_to_human_agents", summary=_handoff_summary(conversation))
    order_id = task.find(order_id_in)
    if order_id is None:
        return Reply.say(say("ask_order_id", lang))
    if task.declined:
        return Reply.say(say("declined", lang))
    if intent == "cancel":
        return _cancel(task, order_id, lang)
    if intent == "address":
        return _change_address(task, order_id, lang)
    # "status", and "return" (which needs the order's items first)
    return Reply.call("get_order_details", order_id=order_id)


def _cancel(task: Task, order_id: str, lang: Lang) -> Reply:
    reason = task.find(reason_in)
    if reason is None:
        return Reply.say(say("ask_reason", lang, order_id=order_id))
    explicit = order_id_in(task.opening) is not None and reason_in(task.opening) is not None
    if explicit or task.confirmed:
        return Reply.call("cancel_pending_order", order_id=order_id, reason=reason)
    shown = reason if lang == "en" else {"ordered by mistake": "买错了"}.get(reason, "不需要了")
    return Reply.say(say("confirm_cancel", lang, order_id=order_id, reason=shown))


def _change_address(task: Task, order_id: str, lang: Lang) -> Reply:
    address = task.find(parse_address)
    if address is None or not address.complete:
        text = say("ask_address", lang, order_id=order_id)
        if address is not None:
            text += say("address_missing", lang, fields=", ".join(address.missing))
        return Reply.say(text)
    opening = parse_address(task.opening)
    explicit = order_id_in(task.opening) is not None and opening == address
    if explicit or task.confirmed:
        return Reply.call("modify_pending_order_address", order_id=order_id, **address.fields())
    return Reply.say(say("confirm_address", lang, order_id=order_id, address=address.one_line()))


def _handoff_summary(conversation: Conversation) -> str:
    who = conversation.verified_user_id or "an unverified guest"
    asked = " / ".join(t.strip() for t in conversation.user_texts()[-3:] if t.strip())
    return f"Customer {who} asked for a human agent. Recent messages: {asked}"[:MAX_SUMMARY]


def _after_tools(conversation: Conversation) -> Reply:
    lang = conversation.lang
    results = conversation.pending
    if len(results) != 1:
        return Reply.say("\n".join(answers.found(r, lang) for r in results))
    result = results[0]
    handler = _AFTER.get(result.name)
    if handler is None:
        return Reply.say(answers.found(result, lang))
    return handler(conversation, result)


def _after_identity(conversation: Conversation, result: Result) -> Reply:
    """After a lookup (a code was sent, or a verified customer's own id) or a code."""
    lang = conversation.lang
    if result.code_sent:
        return Reply.say(say("code_sent", lang))
    user_id = result.user_id
    if user_id is None:
        if result.name != "confirm_identity":
            return Reply.say(say("lookup_failed", lang, problem=answers.problem(result)))
        used_up = "no attempts are left" in result.body or "no active code" in result.body
        return Reply.say(say("code_used_up" if used_up else "wrong_code", lang))
    verified = conversation.verified_as(user_id)
    task = verified.task()
    if task is not None and task.intent not in ("greeting", "help"):
        return _run(task, verified)
    return Reply.say(say("verified", lang))


def _after_order_status(conversation: Conversation, result: Result) -> Reply:
    lang = conversation.lang
    status = field_of(result.body, "status") if result.ok else None
    if status is None:
        return Reply.say(say("no_order_match", lang))
    order_id = field_of(result.body, "order_id") or ""
    state = answers.status_sentence(order_id, status, lang)
    return Reply.say(say("status_only", lang, state=state))


def _after_order_details(conversation: Conversation, result: Result) -> Reply:
    task = conversation.task()
    if task is not None and task.intent == "return":
        return _return_items(task, result, conversation)
    return Reply.say(answers.order_status(result, conversation.lang))


def _return_items(task: Task, result: Result, conversation: Conversation) -> Reply:
    lang = conversation.lang
    if not result.ok:
        return Reply.say(say("lookup_failed", lang, problem=answers.problem(result)))
    order = order_of(result.body)
    if order is None:
        return Reply.say(answers.found(result, lang))
    order_id = order.order_id or str(result.args.get("order_id") or "")
    if order.status != "delivered":
        state = answers.status_sentence(order_id, order.status, lang)
        return Reply.say(say("not_returnable", lang, state=state))
    items = order.items

    def chosen_in(text: str) -> list[str] | None:
        ids = [i.item_id for i in items]
        if wants_everything(text):
            return ids
        named = [i.item_id for i in items if i.name and i.name.lower() in text.lower()]
        picked = [i for i in item_ids_in(text) if i in ids] + named
        return list(dict.fromkeys(picked)) or None

    chosen = task.find(chosen_in)
    if not chosen:
        listing = ", ".join(f"{i.label} [{i.item_id}]" for i in items)
        return Reply.say(say("ask_return_items", lang, order_id=order_id, items=listing))
    method = next((p.method for p in order.payments if p.kind == "payment"), None)
    if method is None:
        return Reply.say(say("failed", lang, problem="no original payment method was found."))
    if chosen_in(task.opening) is not None or task.confirmed:
        return Reply.call(
            "return_delivered_order_items",
            order_id=order_id,
            item_ids=chosen,
            payment_method_id=method,
        )
    picked = [i for i in items if i.item_id in chosen]
    return Reply.say(
        say(
            "confirm_return",
            lang,
            items=", ".join(i.name for i in picked),
            order_id=order_id,
            amount=answers.money(answers.items_total(picked)),
            method=answers.method_words(method, lang, _card_endings(conversation)),
        )
    )


def _card_endings(conversation: Conversation) -> dict[str, str]:
    return answers.card_endings(conversation.results_of("get_user_details"))


def _after_write(conversation: Conversation, result: Result) -> Reply:
    endings = _card_endings(conversation)
    return Reply.say(answers.write_outcome(result, conversation.lang, endings))


def _after_help_search(conversation: Conversation, result: Result) -> Reply:
    """Read the best match before answering: a snippet is only an excerpt."""
    article_id = answers.first_help_hit(result)
    if article_id is None:
        return Reply.say(answers.help_not_found(result, conversation.lang))
    return Reply.call("get_help_article", article_id=article_id)


def _after_help_article(conversation: Conversation, result: Result) -> Reply:
    task = conversation.task()
    question = help_query_of(task.opening) if task is not None else ""
    return Reply.say(answers.help_answer(result, question, conversation.lang))


def _answer_with(
    render: Callable[[Result, Lang], str],
) -> Callable[[Conversation, Result], Reply]:
    return lambda conversation, result: Reply.say(render(result, conversation.lang))


_AFTER: dict[str, Callable[[Conversation, Result], Reply]] = {
    "find_user_id_by_email": _after_identity,
    "find_user_id_by_name_zip": _after_identity,
    "confirm_identity": _after_identity,
    "get_order_status": _after_order_status,
    "get_order_details": _after_order_details,
    "get_user_details": _answer_with(answers.orders_list),
    "calc_shipping": _answer_with(answers.shipping),
    "cancel_pending_order": _after_write,
    "modify_pending_order_address": _after_write,
    "return_delivered_order_items": _after_write,
    "transfer_to_human_agents": _after_write,
    "search_help_center": _after_help_search,
    "get_help_article": _after_help_article,
}
