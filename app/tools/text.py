"""How a tool's result reads for the model: a label line, then `field: value` lines.

Each tool picks its renderer for the tau-bench value it built (an order, a customer, a
product, ...); nothing here guesses a shape from its keys. A long result is cut at a line
boundary with a note that says what was left out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

CURRENCY = "CNY"
MONEY_KEYS = frozenset(
    {"amount", "price", "balance", "shipping_cost", "exchange_price_difference", "total"}
)
ORDER_FIELDS = frozenset(
    {"order_id", "user_id", "address", "items", "fulfillments", "status", "payment_history"}
)
NARROWER = "ask for a narrower query"
DEFAULT_LIMIT = 1500


@dataclass(frozen=True)
class Line:
    text: str
    section: str | None = None  # plural noun of the collection an entry belongs to
    entry: bool = False  # a numbered entry (counted in the cut note), not a header


@dataclass(frozen=True)
class View:
    lines: list[Line]
    hint: str = NARROWER  # what the model can do when the result is cut


def bounded(view: View | str, limit: int = DEFAULT_LIMIT) -> str:
    """The view (or plain text) as at most `limit` characters."""
    if isinstance(view, str):
        return _bounded_plain(view, limit)
    return _bounded(view, limit)


def money(value: Any) -> str:
    """`1,463.70 CNY`; anything that is not a number is shown as it is."""
    number = _decimal(value)
    return f"{number:,.2f} {CURRENCY}" if number is not None else _scalar(value)


# --- known shapes -------------------------------------------------------------------------


def order_lines(order: Mapping[str, Any]) -> View:
    items = _list(order.get("items"))
    payments = _list(order.get("payment_history"))
    paid = _total(p for p in payments if _kind(p) == "payment")
    refunded = _total(p for p in payments if _kind(p) == "refund")
    methods = _unique(str(p.get("payment_method_id")) for p in payments if _kind(p) == "payment")
    label = f"Order {order.get('order_id')}: {order.get('status')}, {_count(items, 'item')}"
    if paid is not None:
        label += f", paid {money(paid)}"
        if methods:
            label += f" by {' and '.join(methods)}"
    if refunded:
        label += f", refunded {money(refunded)}"
    lines = [Line(label)]
    lines += _fields(order, ("user_id",))
    if isinstance(order.get("address"), Mapping):
        lines.append(Line(f"ship to: {_address(order['address'])}"))
    extra = {k: v for k, v in order.items() if k not in ORDER_FIELDS}
    lines += [Line(f"{k}: {v}") for k, v in _flatten(extra)]
    lines += _numbered("items", [_item(i) for i in items])
    fulfillments = _list(order.get("fulfillments"))
    lines += _numbered("fulfillments", [_fulfillment(f) for f in fulfillments])
    lines += _numbered("payments", [_payment(p) for p in payments])
    return View(lines, hint="ask the customer which item they mean")


def _item(item: Mapping[str, Any]) -> str:
    options = _options(item.get("options"))
    text = (
        f"{item.get('name')}: item_id {item.get('item_id')}, product_id "
        f"{item.get('product_id')}, {money(item.get('price'))}"
    )
    return f"{text}; {options}" if options else text


def _fulfillment(fulfillment: Mapping[str, Any]) -> str:
    tracking = ", ".join(str(t) for t in _list_of_any(fulfillment.get("tracking_id")))
    items = ", ".join(str(i) for i in _list_of_any(fulfillment.get("item_ids")))
    return f"tracking {tracking or '-'}: item_ids {items or '-'}"


def _payment(payment: Mapping[str, Any]) -> str:
    return f"{_kind(payment)} {money(payment.get('amount'))} via {payment.get('payment_method_id')}"


def customer_lines(customer: Mapping[str, Any]) -> View:
    name = _person(customer.get("name"))
    methods = customer["payment_methods"]
    orders = _list_of_any(customer.get("orders"))
    who = customer.get("user_id")
    label = f"Customer {who}: {name}" if who else f"Customer {name}"
    label += f", {_count(methods, 'payment method')}, {_count(orders, 'order')}"
    lines = [Line(label)]
    if name:
        lines.append(Line(f"name: {name}"))
    lines += _fields(customer, ("email",))
    if isinstance(customer.get("address"), Mapping):
        lines.append(Line(f"address: {_address(customer['address'])}"))
    known = {"user_id", "name", "email", "address", "payment_methods", "orders"}
    extra = {k: v for k, v in customer.items() if k not in known}
    lines += [Line(f"{k}: {v}") for k, v in _flatten(extra)]
    lines += _numbered("payment methods", [_payment_method(k, m) for k, m in methods.items()])
    lines += _numbered("orders", [str(o) for o in orders])
    return View(lines, hint="ask the customer which order they mean, then call get_order_details")


def _payment_method(method_id: str, method: Any) -> str:
    if not isinstance(method, Mapping):
        return f"{method_id}: {_scalar(method)}"
    source = str(method.get("source", "")).replace("_", " ")
    text = f"{method_id}: {source}"
    if method.get("brand") or method.get("last_four"):
        text += f", {method.get('brand') or 'card'} ending {method.get('last_four') or '?'}"
    if "balance" in method:
        text += f", balance {money(method['balance'])}"
    return text


def product_lines(product: Mapping[str, Any]) -> View:
    variants = [v for v in product["variants"].values() if isinstance(v, Mapping)]
    available = [v for v in variants if v.get("available")]
    prices = [p for p in (_decimal(v.get("price")) for v in variants) if p is not None]
    label = (
        f"Product {product.get('name')} (product_id {product.get('product_id')}): "
        f"{_count(variants, 'variant')}, {len(available)} available"
    )
    if prices:
        low, high = min(prices), max(prices)
        label += f", {money(low)}" if low == high else f", {low:,.2f}-{high:,.2f} {CURRENCY}"
    keys = _shared_option_keys(variants)
    lines = [Line(label)]
    if keys:
        lines.append(Line(f"options: {' / '.join(keys)}"))
    ordered = available + [v for v in variants if not v.get("available")]
    entries = [_variant(v, keys) for v in ordered]
    lines += _numbered("variants (item_id: price; options)", entries, noun="variants")
    return View(lines, hint="ask the customer which options they want")


def _variant(variant: Mapping[str, Any], keys: list[str] | None) -> str:
    options = variant.get("options")
    if keys and isinstance(options, Mapping):
        shown = " / ".join(_scalar(options.get(k)) for k in keys)
    else:
        shown = _options(options)
    text = f"{variant.get('item_id')}: {money(variant.get('price'))}; {shown}"
    return text if variant.get("available") else f"{text}; NOT available"


def _shared_option_keys(variants: list[Mapping[str, Any]]) -> list[str] | None:
    """The option names, when every variant has exactly the same ones."""
    if not variants or not all(isinstance(v.get("options"), Mapping) for v in variants):
        return None
    first = list(variants[0]["options"])
    if not first or any(set(v["options"]) != set(first) for v in variants):
        return None
    return first


def product_types_lines(types: Mapping[str, Any]) -> View:
    lines = [Line(f"Product types: {len(types)} (name: product_id)")]
    lines += _numbered("types", [f"{name}: {pid}" for name, pid in types.items()], header=False)
    return View(lines, hint="ask the customer which product they mean")


def shipping_lines(result: Mapping[str, Any]) -> View:
    cost = result.get("shipping_cost")
    lines = [Line(f"Shipping cost: {money(cost)}")]
    rest = {k: v for k, v in result.items() if k not in ("shipping_cost", "currency")}
    lines += [Line(f"{k}: {v}") for k, v in _flatten(rest)]
    return View(lines)


def generic_lines(tool_name: str, value: Any) -> View:
    if isinstance(value, Mapping):
        label = f"Result of {tool_name}: {_count(value, 'field')}"
    elif isinstance(value, list | tuple):
        label = f"Result of {tool_name}: {_count(value, 'entry', 'entries')}"
    else:
        return View([Line(f"Result of {tool_name}: {_scalar(value)}")])
    flat = [Line(f"{k}: {v}", section="fields", entry=True) for k, v in _flatten(value)]
    return View([Line(label), *flat])


# --- pieces -------------------------------------------------------------------------------


def _numbered(
    title: str, entries: list[str], *, noun: str | None = None, header: bool = True
) -> list[Line]:
    if not entries:
        return []
    section = noun or title
    lines = [Line(f"{title}:", section=section)] if header else []
    width = len(str(len(entries)))
    lines += [
        Line(f"  {n:>{width}}. {text}", section=section, entry=True)
        for n, text in enumerate(entries, 1)
    ]
    return lines


def _fields(source: Mapping[str, Any], keys: tuple[str, ...]) -> list[Line]:
    return [Line(f"{k}: {_scalar(source[k])}") for k in keys if source.get(k) not in (None, "")]


def _flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """('a.b[0].c', shown value) pairs; lists of plain values stay on one line."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _flatten(inner, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list | tuple) and any(isinstance(v, Mapping | list) for v in value):
        for i, inner in enumerate(value):
            yield from _flatten(inner, f"{prefix}[{i}]")
    elif isinstance(value, list | tuple):
        yield prefix, ", ".join(_scalar(v) for v in value) or "(none)"
    else:
        last = prefix.rsplit(".", 1)[-1]
        yield prefix, money(value) if last in MONEY_KEYS else _scalar(value)


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return f"{value:f}" if _modest(value) else str(value)
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, default=str, ensure_ascii=False)
    return str(value)


def _decimal(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal, str)):
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() and _modest(number) else None


def _modest(number: Decimal) -> bool:
    """Small enough to write out in full (1e999999 in fixed point is a megabyte)."""
    return not number.is_finite() or abs(number.adjusted()) <= 30


def _total(payments: Iterable[Mapping[str, Any]]) -> Decimal | None:
    amounts = [_decimal(p.get("amount")) for p in payments]
    known = [a for a in amounts if a is not None]
    return sum(known, Decimal(0)) if known else None


def _kind(payment: Mapping[str, Any]) -> str:
    return str(payment.get("transaction_type") or "transaction")


def _options(options: Any) -> str:
    if not isinstance(options, Mapping):
        return "" if options in (None, "", {}) else _scalar(options)
    return ", ".join(f"{k} {_scalar(v)}" for k, v in options.items())


def _address(address: Mapping[str, Any]) -> str:
    region = " ".join(str(address[k]) for k in ("state", "zip") if address.get(k))
    parts = [address.get("address1"), address.get("address2"), address.get("city"), region]
    parts.append(address.get("country"))
    return ", ".join(str(p) for p in parts if p)


def _person(name: Any) -> str:
    if isinstance(name, Mapping):
        return " ".join(str(name[k]) for k in ("first_name", "last_name") if name.get(k))
    return "" if name is None else str(name)


def _list(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list | tuple) else []


def _list_of_any(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _count(collection: Any, noun: str, plural: str | None = None) -> str:
    n = len(collection)
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


# --- length -------------------------------------------------------------------------------


def _bounded(view: View, limit: int) -> str:
    lines = view.lines
    full = "\n".join(line.text for line in lines)
    if len(full) <= limit:
        return full
    starts = _prefix_lengths(lines)
    for keep in range(len(lines) - 1, 0, -1):
        kept = lines[:keep]
        while len(kept) > 1 and not kept[-1].entry and kept[-1].section is not None:
            kept = kept[:-1]  # a list header without any of its entries
        note = _cut_note(lines[len(kept) :], view.hint)
        if starts[len(kept)] + len(note) <= limit:
            return "\n".join([*(line.text for line in kept), note])
    return _clip(lines[0].text, limit)


def _prefix_lengths(lines: list[Line]) -> list[int]:
    """starts[k]: characters of the first k lines joined, plus the newline before a note."""
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line.text) + 1)
    return starts


def _cut_note(dropped: list[Line], hint: str) -> str:
    counts: dict[str, int] = {}
    other = 0
    for line in dropped:
        if line.entry and line.section:
            counts[line.section] = counts.get(line.section, 0) + 1
        elif line.section is None:
            other += 1
    parts = [f"{n} more {section}" for section, n in counts.items()]
    if other:
        parts.append(f"{other} more {'line' if other == 1 else 'lines'}")
    return f"(cut: {', '.join(parts) or 'more'} not shown; {hint})"


def _bounded_plain(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    budget = limit - len(f"\n(cut: {len(text)} more characters)")  # the longest note
    if budget <= 0:
        return _clip(text, limit)
    cut = text.rfind("\n", 0, budget + 1)
    if cut < budget // 2:
        cut = text.rfind(" ", 0, budget + 1)
    if cut <= 0:
        cut = budget
    return f"{text[:cut].rstrip()}\n(cut: {len(text) - cut} more characters)"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"
