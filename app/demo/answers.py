"""Answers built from what the tools returned, read as a model reads it (app/demo/reading.py):
the tool's text on success, "Error: ..." on failure, "Declined: ..." when the customer refused
a change. Never more than the tool said."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from app.demo.conversation import Result
from app.demo.reading import Item, OrderText, amount, article_of, entries, field_of, order_of
from app.demo.texts import Lang, say

MAX_SUMMARY = 300
MAX_RAW = 200  # raw (non-JSON) tool text shown to the customer: one sentence at most
GENERIC_PROBLEM = "the request could not be completed."
# Errors about the call itself (bad arguments, unknown tool) speak to the model, not the customer.
_INTERNAL_ERRORS = ("Error: invalid arguments", "Error: there is no tool")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s")

STATUS_NOTES: dict[str, dict[Lang, str]] = {
    "pending": {
        "en": "It hasn't shipped yet, so it can still be changed or cancelled.",
        "zh": "尚未发货，仍可修改或取消。",
    },
    "processed": {"en": "It is being prepared for shipping.", "zh": "正在备货，即将发货。"},
    "delivered": {
        "en": "If something is wrong with it, I can start a return.",
        "zh": "如有问题，我可以为您办理退货。",
    },
}
# An order's status as a sentence: the shop's statuses are not all adjectives ("return
# requested"), and "cancelled" needs no note saying it again.
STATUS_SENTENCES: dict[str, dict[Lang, str]] = {
    "pending": {"en": "Order {order_id} is pending.", "zh": "订单 {order_id} 尚未发货。"},
    "processed": {
        "en": "Order {order_id} has been processed.",
        "zh": "订单 {order_id} 已处理。",
    },
    "delivered": {
        "en": "Order {order_id} has been delivered.",
        "zh": "订单 {order_id} 已送达。",
    },
    "cancelled": {"en": "Order {order_id} is cancelled.", "zh": "订单 {order_id} 已取消。"},
    "pending (item modified)": {
        "en": "Order {order_id} is pending, with its items changed.",
        "zh": "订单 {order_id} 尚未发货，商品已修改。",
    },
    "return requested": {
        "en": "A return has been requested for order {order_id}.",
        "zh": "订单 {order_id} 已申请退货。",
    },
    "exchange requested": {
        "en": "An exchange has been requested for order {order_id}.",
        "zh": "订单 {order_id} 已申请换货。",
    },
}
UNKNOWN_STATUS: dict[Lang, str] = {
    "en": "Order {order_id}: {status}.",
    "zh": "订单 {order_id} 的状态：{status}。",
}
LABELS: dict[str, dict[Lang, str]] = {
    "items": {"en": "Items:", "zh": "商品："},
    "tracking": {"en": "Tracking: {ids}.", "zh": "物流单号：{ids}。"},
    "total": {"en": "Total: {total}.", "zh": "合计：{total}。"},
}
# Payment methods as the confirmation card words them (app/tools/summaries.py `_method`),
# from the method's id; a credit card's last four digits only the customer's details show.
_CARD_ENDING = re.compile(r"^(?P<id>\S+): credit card\b.* ending (?P<last4>\d{4})\b")
METHOD_WORDS: dict[str, dict[Lang, str]] = {
    "credit_card": {"en": "your credit card", "zh": "您的信用卡"},
    "credit_card_ending": {"en": "credit card ending {last4}", "zh": "尾号 {last4} 的信用卡"},
    "gift_card": {"en": "gift card ending {last4}", "zh": "尾号 {last4} 的礼品卡"},
    "paypal": {"en": "PayPal", "zh": "PayPal"},
    "other": {"en": "the original payment method", "zh": "原支付方式"},
}


def status_sentence(order_id: str, status: str, lang: Lang) -> str:
    """ "Order #W1 is pending.", "A return has been requested for order #W1."."""
    template = STATUS_SENTENCES.get(status, {}).get(lang) or UNKNOWN_STATUS[lang]
    return template.format(order_id=order_id, status=status)


def card_endings(customer_texts: list[str]) -> dict[str, str]:
    """{method id: last four digits} of the credit cards get_user_details listed."""
    found: dict[str, str] = {}
    for text in customer_texts:
        for entry in entries(text, "payment methods"):
            if card := _CARD_ENDING.match(entry):
                found[card.group("id")] = card.group("last4")
    return found


def method_words(method_id: str, lang: Lang, endings: dict[str, str] | None = None) -> str:
    """A payment method for the customer: "PayPal", "gift card ending 5904", never its id."""
    if method_id in (endings or {}):
        return METHOD_WORDS["credit_card_ending"][lang].format(last4=(endings or {})[method_id])
    source = method_id.rsplit("_", 1)[0]
    if source == "gift_card":
        return METHOD_WORDS["gift_card"][lang].format(last4=method_id[-4:])
    return METHOD_WORDS.get(source, METHOD_WORDS["other"])[lang]


def money(value: Any) -> str:
    try:
        return f"{Decimal(str(value)):.2f}"
    except ArithmeticError:
        return str(value)


def number(value: Decimal) -> int | float:
    """A JSON-friendly number for a tool argument: 2, not 2.0 or "2"."""
    return int(value) if value == value.to_integral_value() else float(value)


def problem(result: Result) -> str:
    """The first sentence of an error, without the prefix: short, and for the customer."""
    content = result.content.strip()
    if content.startswith(_INTERNAL_ERRORS):
        return GENERIC_PROBLEM
    return first_sentence(content.removeprefix("Error:").strip()) or GENERIC_PROBLEM


def first_sentence(text: str, limit: int = MAX_RAW) -> str:
    """The first sentence of text, cut to at most `limit` characters (with an ellipsis)."""
    first = _SENTENCE_END.split(text.strip(), maxsplit=1)[0]
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _line(key: str, lang: Lang, **values: object) -> str:
    return LABELS[key][lang].format(**values)


def items_total(items: list[Item]) -> Decimal:
    return sum((item.price for item in items), Decimal("0"))


def order_status(result: Result, lang: Lang) -> str:
    if not result.ok:
        return say("lookup_failed", lang, problem=problem(result))
    order = order_of(result.body)
    if order is None:
        return found(result, lang)
    status = order.status
    order_id = order.order_id or result.args.get("order_id") or ""
    lines = [status_sentence(order_id, status, lang)]
    note = STATUS_NOTES.get(status)
    if note:
        lines[0] += (" " if lang == "en" else "") + note[lang]
    if order.items:
        lines.append(_line("items", lang))
        lines.extend(f"- {i.label}: {money(i.price)}" for i in order.items)
    if order.tracking:
        lines.append(_line("tracking", lang, ids=", ".join(order.tracking)))
    if order.items:
        lines.append(_line("total", lang, total=money(items_total(order.items))))
    return "\n".join(lines)


def orders_list(result: Result, lang: Lang) -> str:
    if not result.ok:
        return say("lookup_failed", lang, problem=problem(result))
    if not result.body.startswith("Customer "):
        return found(result, lang)
    ids = entries(result.body, "orders")
    if not ids:
        return say("no_orders", lang)
    return say("orders", lang, count=len(ids), ids=", ".join(ids), first=ids[0])


def shipping(result: Result, lang: Lang) -> str:
    if not result.ok:
        return say("lookup_failed", lang, problem=problem(result))
    shown = field_of(result.body, "Shipping cost")
    cost = amount(shown) if shown else None
    if shown is None or cost is None:
        return found(result, lang)
    currency = shown.rsplit(" ", 1)[-1] if shown.endswith(" CNY") else None
    return say(
        "shipping",
        lang,
        weight=result.args.get("weight_kg", "?"),
        distance=result.args.get("distance_km", "?"),
        cost=f"{money(cost)} {currency}" if currency else money(cost),
    )


def refund_note(order: OrderText, lang: Lang, endings: dict[str, str] | None = None) -> str:
    """The refunds the change added to the order's payment history."""
    refunds = [p for p in order.payments if p.kind == "refund"]
    if not refunds:
        return ""
    last = refunds[-1]
    timing = "refund_gift_card" if last.method.startswith("gift_card") else "refund_other"
    return say(
        "refund",
        lang,
        amount=money(last.amount),
        method=method_words(last.method, lang, endings),
        timing=say(timing, lang),
    )


def write_outcome(result: Result, lang: Lang, endings: dict[str, str] | None = None) -> str:
    """After a change: what happened, from the tool's own answer (`endings`: the credit
    cards' last digits, when the conversation has them)."""
    if result.is_declined:
        return say("declined", lang)
    if result.is_error:
        return say("failed", lang, problem=problem(result))
    if result.name == "transfer_to_human_agents":
        return say("transferred", lang)
    order = order_of(result.body)
    if order is None:
        return found(result, lang)
    order_id = order.order_id or result.args.get("order_id") or ""
    if result.name == "cancel_pending_order":
        return say("cancelled", lang, order_id=order_id, refund=refund_note(order, lang, endings))
    if result.name == "modify_pending_order_address":
        return say("address_changed", lang, order_id=order_id, address=order.ship_to)
    if result.name == "return_delivered_order_items":
        recorded = order.fields.get("return_items", "")
        chosen = set(result.args.get("item_ids") or recorded.split(", "))
        items = [i for i in order.items if i.item_id in chosen]
        method = result.args.get("payment_method_id") or order.fields.get(
            "return_payment_method_id"
        )
        return say(
            "returned",
            lang,
            items=", ".join(i.name for i in items) or "the items",
            order_id=order_id,
            amount=money(items_total(items)),
            method=method_words(str(method or ""), lang, endings),
        )
    return found(result, lang)


def found(result: Result, lang: Lang) -> str:
    """Any other result: a short plain rendering of it."""
    if result.is_declined:
        return say("declined", lang)
    if result.is_error:
        return say("lookup_failed", lang, problem=problem(result))
    return say("found", lang, summary=describe(result.body))


def describe(text: str) -> str:
    """A one-line result's first sentence; the lines of a longer one, joined."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if len(lines) <= 1:
        return first_sentence(text)
    if lines[0].startswith("Result of "):  # "Result of <tool>: 2 fields": its fields say more
        lines = lines[1:]
    joined = "; ".join(lines)
    return joined if len(joined) <= MAX_SUMMARY else joined[: MAX_SUMMARY - 1] + "…"


MAX_HELP_LINES = 3
MAX_HELP_CHARS = 600
MAX_LINE_SENTENCES = 2
_WORD = re.compile(r"[a-z0-9]+")
_STOP_WORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "can",
        "could",
        "do",
        "does",
        "for",
        "from",
        "have",
        "how",
        "i",
        "if",
        "is",
        "it",
        "long",
        "me",
        "much",
        "my",
        "of",
        "on",
        "or",
        "our",
        "please",
        "take",
        "the",
        "there",
        "this",
        "to",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    }
)


def first_help_hit(result: Result) -> str | None:
    """The id of search_help_center's best match, or None when it found nothing."""
    if not result.ok:
        return None
    return field_of(result.body, "results[0].id") or None


def help_not_found(result: Result, lang: Lang) -> str:
    if result.is_error:
        return say("lookup_failed", lang, problem=problem(result))
    return say("no_help_article", lang)


def help_answer(result: Result, question: str, lang: Lang) -> str:
    """A short answer from the article's own body, naming the article."""
    if not result.ok:
        return help_not_found(result, lang)
    article = article_of(result.body)
    if article is None:
        return found(result, lang)
    title, body = article
    excerpt = help_excerpt(body, question)
    if not excerpt:
        return say("no_help_article", lang)
    return say("help_answer", lang, title=title, excerpt=excerpt)


def help_excerpt(body: str, question: str) -> str:
    """The article's first line, then the lines holding the question's words (or simply the
    next lines); each at most two sentences, at most three lines and MAX_HELP_CHARS."""
    lines = [_first_sentences(line.strip()) for line in body.splitlines() if line.strip()]
    if not lines:
        return ""
    keys = [w[:5] for w in _WORD.findall(question.lower()) if w not in _STOP_WORDS]
    matching = [line for line in lines[1:] if any(k in line.lower() for k in keys)]
    chosen = [lines[0], *(matching or lines[1:])][:MAX_HELP_LINES]
    text = chosen[0]
    for line in chosen[1:]:
        if len(text) + len(line) + 1 > MAX_HELP_CHARS:
            break
        text += "\n" + line
    return text if len(text) <= MAX_HELP_CHARS else text[: MAX_HELP_CHARS - 1] + "…"


def _first_sentences(line: str) -> str:
    return " ".join(_SENTENCE_END.split(line)[:MAX_LINE_SENTENCES])
