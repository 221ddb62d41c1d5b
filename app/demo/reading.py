"""How the demo model reads a tool result: the same text a real model reads
(`OBSERVATION_FORMAT=text`), a label line and then `field: value` lines and numbered lists.

    Order #W2611340: pending, 1 item, paid 32.00 CNY by paypal_5727330
    ship to: 1 Elm St, Austin, TX 78701, USA
    items:
      1. Water Bottle: item_id 1000, product_id 8310926033, 32.00 CNY; capacity 1000ml
    fulfillments:
      1. tracking 357962501027: item_ids 1000
    payments:
      1. payment 32.00 CNY via paypal_5727330

Only what the demo's answers need is read; anything else is left alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

_ENTRY = re.compile(r"^\s+\d+\.\s(.*)$")
_ORDER_LABEL = re.compile(r"^Order (\S+): ([^,]+),")
_ITEM = re.compile(
    r"^(?P<name>.+?): item_id (?P<item_id>\S+), product_id (?P<product_id>\S+), "
    r"(?P<price>-?[\d,]+(?:\.\d+)?) CNY(?:; (?P<options>.*))?$"
)
_PAYMENT = re.compile(r"^(?P<kind>\S+) (?P<amount>-?[\d,]+(?:\.\d+)?) CNY via (?P<method>\S+)$")
_TRACKING = re.compile(r"^tracking (?P<ids>.+?): item_ids")
_AMOUNT = re.compile(r"(-?[\d,]+(?:\.\d+)?)\s*([A-Z]{3})?")
# A help article's body runs from its `body:` line to the next field the article has.
_BODY_END = ("\nnote: ", "\n(cut: ")


@dataclass(frozen=True)
class Item:
    name: str
    item_id: str
    price: Decimal
    options: str  # as written: "color black, size S"

    @property
    def label(self) -> str:
        return f"{self.name} ({self.options})" if self.options else self.name


@dataclass(frozen=True)
class Payment:
    kind: str  # payment | refund
    amount: Decimal
    method: str


@dataclass(frozen=True)
class OrderText:
    order_id: str
    status: str
    items: list[Item] = field(default_factory=list)
    tracking: list[str] = field(default_factory=list)
    payments: list[Payment] = field(default_factory=list)
    ship_to: str = ""
    fields: dict[str, str] = field(default_factory=dict)


def lines_of(text: str) -> list[str]:
    return text.strip().splitlines()


def field_of(text: str, key: str) -> str | None:
    """The value of the first `key: value` line."""
    prefix = f"{key}: "
    for line in lines_of(text):
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    return None


def entries(text: str, title: str) -> list[str]:
    """The numbered entries under the `title:` line."""
    out: list[str] = []
    inside = False
    for line in lines_of(text):
        if not line.startswith(" "):
            inside = line.rstrip() == f"{title}:"
            continue
        if inside and (entry := _ENTRY.match(line)):
            out.append(entry.group(1))
    return out


def amount(text: str) -> Decimal | None:
    found = _AMOUNT.search(text)
    return _decimal(found.group(1)) if found else None


def order_of(text: str) -> OrderText | None:
    """An order as get_order_details (or a write on an order) shows it, or None."""
    label = _ORDER_LABEL.match(text.strip())
    if label is None:
        return None
    items = [item for entry in entries(text, "items") if (item := _item(entry)) is not None]
    tracking = [t.strip() for e in entries(text, "fulfillments") for t in _tracking(e)]
    payments = [p for e in entries(text, "payments") if (p := _payment(e)) is not None]
    fields = {
        line.split(": ", 1)[0]: line.split(": ", 1)[1]
        for line in lines_of(text)[1:]
        if not line.startswith(" ") and ": " in line
    }
    return OrderText(
        order_id=label.group(1),
        status=label.group(2).strip(),
        items=items,
        tracking=tracking,
        payments=payments,
        ship_to=fields.get("ship to", ""),
        fields=fields,
    )


def article_of(text: str) -> tuple[str, str] | None:
    """(title, body) of a help article as get_help_article shows it."""
    title = field_of(text, "title") or field_of(text, "id")
    start = text.find("\nbody: ")
    if title is None or start < 0:
        return None
    body = text[start + len("\nbody: ") :]
    for end in _BODY_END:
        if (at := body.find(end)) >= 0:
            body = body[:at]
    return title, body


def _item(entry: str) -> Item | None:
    found = _ITEM.match(entry)
    price = _decimal(found.group("price")) if found else None
    if found is None or price is None:
        return None
    return Item(found.group("name"), found.group("item_id"), price, found.group("options") or "")


def _payment(entry: str) -> Payment | None:
    found = _PAYMENT.match(entry)
    value = _decimal(found.group("amount")) if found else None
    if found is None or value is None:
        return None
    return Payment(found.group("kind"), value, found.group("method"))


def _tracking(entry: str) -> list[str]:
    found = _TRACKING.match(entry)
    if found is None or found.group("ids") == "-":
        return []
    return found.group("ids").split(", ")


def _decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None
