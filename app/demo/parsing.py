"""Reading one customer message: what they want (intent) and the facts they gave (slots).

English, plus the Chinese phrasings that cost one alternative in a regular expression.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Literal

Intent = Literal[
    "human",
    "cancel",
    "address",
    "return",
    "status",
    "shipping",
    "orders",
    "greeting",
    "help",
    "policy",
]
Reason = Literal["ordered by mistake", "no longer needed"]

# Intents that read or change a customer's data: a guest must be verified first.
NEEDS_IDENTITY: frozenset[Intent] = frozenset({"cancel", "address", "return", "status", "orders"})

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
_ORDER_ID = re.compile(r"(?<![A-Za-z0-9])#?\s?([Ww]\d{7})(?!\d)")
_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
)
_ITEM_ID = re.compile(r"(?<!\d)(\d{10})(?!\d)")
# A one-time code as people type it: 123456, 123 456, 123-456.
_CODE = re.compile(r"(?<![\dA-Za-z#])(\d{3})[ -]?(\d{3})(?!\d)")
# A match starts where a number (or an email's local part) starts: starting inside a long
# run of digits, each start re-scanned the rest of it, 8,000 digits took seconds.
_NUMBER = r"(?<!\d)(\d+(?:[.,]\d+)?)"
_WEIGHT = re.compile(_NUMBER + r"\s*(?:kilograms?|kilos?|kgs?|公斤|千克)(?![A-Za-z])", re.I)
_DISTANCE = re.compile(_NUMBER + r"\s*(?:kilomet(?:er|re)s?|kms?|公里|千米)(?![A-Za-z])", re.I)

_MISTAKE = re.compile(
    r"mistake|by accident|accidental|wrong order|买错|下错|误购|不小心|点错", re.I
)
_NOT_NEEDED = re.compile(
    r"no longer need|not needed|don'?t need|do not need|no longer want|don'?t want|"
    r"changed my mind|不需要|不想要|不要了|用不着|不用了",
    re.I,
)
_EVERYTHING = re.compile(
    r"\b(?:everything|all(?: of)?(?: the)? items|all of (?:it|them))\b|全部|所有", re.I
)

_YES = re.compile(
    r"^(?:yes|yeah|yep|yup|sure|ok|okay|confirm(?:ed)?|go ahead|please do|do it|correct|"
    r"approved?|确认|确定|是的|是|好的|好|可以|对|没问题)(?![A-Za-z])",
    re.I,
)
_NO = re.compile(
    r"^(?:no|nope|nah|not now|don'?t|do not|never ?mind|stop|不要|不用|不|算了|否|别)(?![A-Za-z])",
    re.I,
)

# A policy question ("how long do refunds take?", "what is your return policy", "退款多久"):
# a question form, a help-centre topic, and no particular order of the customer's.
_POLICY_ASKS = re.compile(
    r"\bhow (?:long|soon|many days|quickly|fast|much time|do(?:es)?|can|to)\b|\bpolic(?:y|ies)\b|"
    r"\bcan (?:i|you|we)\b|\bdo you\b|\bis it possible\b|\bwhat(?:'s| is| are)? (?:your|the)\b|"
    r"\bam i able\b|\bare (?:refunds|returns|exchanges)\b|"
    r"多久|多长时间|几天|多少天|政策|规定|规则|怎么|怎样|如何|能不能|可不可以|可以.{0,12}吗|能.{0,12}吗",
    re.I,
)
# Help-centre topics: the words to find them, and English search words for Chinese ones
# (the help centre's search is English).
_POLICY_TOPICS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\brefund|退款|退钱", re.I), "refund"),
    (re.compile(r"\breturn|退货|退回", re.I), "return"),
    (re.compile(r"\bexchang|换货|更换|调换|换(?:尺码|颜色|大小)", re.I), "exchange"),
    (re.compile(r"\bgift ?cards?\b|礼品卡|礼物卡|购物卡", re.I), "gift card"),
    (re.compile(r"\bgifts?\b|礼物|礼品(?!卡)", re.I), "gift"),
    (
        re.compile(
            r"\b(?:shipping|delivery) (?:times?|takes?)\b|\bdeliver|\bship|配送|送达|到货", re.I
        ),
        "shipping time",
    ),
    (re.compile(r"\bcancel|取消", re.I), "cancel order"),
    (re.compile(r"\bpay(?:ment|ing)?\b|付款|支付", re.I), "payment methods"),
    (re.compile(r"\bdamaged|\bbroken|损坏|破损|坏了", re.I), "damaged item"),
)
_HOW_LONG_ZH = re.compile(r"多久|多长时间|几天|多少天")
# "send order #W… to 120 River Road, Baltimore, …": a new address named by its street line (a
# number, words, a comma), asked about one order; "ship 2 kg to 300 km" has no order.
_SEND_TO_STREET = re.compile(
    r"\b(?:send|ship|deliver|redirect|forward)\b.{0,60}?"
    r"\b(?:to|at)\s+\d+[A-Za-z]?\s+[A-Za-z][^,\d]*,",
    re.I,
)
_OWN_ORDER = re.compile(
    r"\b(?:my|this|that|these|those|our) (?:order|package|parcel|purchase|item|items)\b|"
    r"我的订单|这个订单|这笔订单|我的包裹",
    re.I,
)

_INTENTS: tuple[tuple[Intent, re.Pattern[str]], ...] = (
    (
        "human",
        re.compile(
            r"\b(?:human|real person|representative|live agent|operator)\b|"
            r"\btalk to (?:a |an |some)?(?:person|agent|one|body)|人工|真人|转接",
            re.I,
        ),
    ),
    ("cancel", re.compile(r"\bcancel(?!l?ed)|取消", re.I)),
    (
        "address",
        re.compile(
            r"\b(?:change|update|modify|correct|fix|new|wrong)\b.{0,40}\baddress|"
            r"\baddress\b.{0,40}\b(?:to|change|update|wrong)\b|"
            r"(?:改|更改|修改|换|变更).{0,10}地址|地址.{0,10}(?:改|换|更新|修改|变更)",
            re.I,
        ),
    ),
    ("return", re.compile(r"\breturn|\bsend (?:it|them) back|退货|退回|退掉|退了", re.I)),
    (
        "shipping",
        re.compile(
            r"\bshipping\b|\bpostage\b|\bdelivery (?:cost|fee|price)|\bcost to (?:ship|send)|"
            r"运费|邮费|快递费",
            re.I,
        ),
    ),
    (
        "orders",
        re.compile(
            r"\bmy orders\b|\b(?:list|show|see)\b.{0,20}\borders\b|\border history\b|"
            r"我的订单|订单列表|所有订单|历史订单|哪些订单",
            re.I,
        ),
    ),
    (
        "status",
        re.compile(
            r"\bwhere(?:'s| is)?\b.{0,20}\b(?:order|package|parcel)|\btrack|\border status|"
            r"\bstatus\b|\bshipped\b|\barrive|在哪|到哪|物流|状态|发货|到了吗",
            re.I,
        ),
    ),
    (
        "greeting",
        re.compile(
            r"^\W*(?:hi|hello|hey|good (?:morning|afternoon|evening))\b|^\W*(?:你好|您好|嗨|哈喽)",
            re.I,
        ),
    ),
    (
        "help",
        re.compile(
            r"what can you do|what do you do|\bhelp\b|who are you|"
            r"你能做什么|你可以做什么|能帮|帮助|功能|你是谁",
            re.I,
        ),
    ),
)


def is_chinese(text: str) -> bool:
    return bool(_CJK.search(text))


def intent_of(text: str) -> Intent | None:
    """What the message asks for. A bare order id, email or number is data, not an intent
    (it answers a question the assistant asked), so it gives None."""
    has_order = order_id_in(text) is not None
    if not has_order and is_policy_question(text):
        return "policy"
    for intent, pattern in _INTENTS:
        sends_to = intent == "address" and has_order and _SEND_TO_STREET.search(text)
        if not (pattern.search(text) or sends_to):
            continue
        if intent == "orders" and has_order:
            return "status"  # "我的订单 #W… 到哪了" asks about one order
        return intent
    if weight_in(text) is not None and distance_in(text) is not None and not has_order:
        return "shipping"
    return None


def is_policy_question(text: str) -> bool:
    """A general question about the shop's policies, not a request about one order."""
    if order_id_in(text) is not None or _OWN_ORDER.search(text):
        return False
    if weight_in(text) is not None and distance_in(text) is not None:
        return False  # a shipping estimate
    if not any(pattern.search(text) for pattern, _ in _POLICY_TOPICS):
        return False
    return bool(_POLICY_ASKS.search(text))


def help_query_of(text: str) -> str:
    """What to search the help centre for: the question itself, or for a Chinese one its
    topics in English words."""
    if not is_chinese(text):
        return " ".join(text.split())
    words = [english for pattern, english in _POLICY_TOPICS if pattern.search(text)]
    if _HOW_LONG_ZH.search(text):
        words.append("how long take")
    return " ".join(words) or " ".join(text.split())


def order_id_in(text: str) -> str | None:
    """`#W1234567` as the shop writes it, whatever the customer typed (`w1234567`, `# W…`)."""
    match = _ORDER_ID.search(text)
    return f"#{match.group(1).upper()}" if match else None


def email_in(text: str) -> str | None:
    match = _EMAIL.search(text)
    return match.group(0).strip(".") if match else None


def code_in(text: str) -> str | None:
    """A 6-digit one-time code, without the space or dash a customer may put in it."""
    match = _CODE.search(text)
    return match.group(1) + match.group(2) if match else None


def item_ids_in(text: str) -> list[str]:
    return list(dict.fromkeys(_ITEM_ID.findall(text)))


def wants_everything(text: str) -> bool:
    return bool(_EVERYTHING.search(text))


def reason_in(text: str) -> Reason | None:
    if _MISTAKE.search(text):
        return "ordered by mistake"
    if _NOT_NEEDED.search(text):
        return "no longer needed"
    return None


def _number(pattern: re.Pattern[str], text: str) -> Decimal | None:
    match = pattern.search(text)
    if match is None:
        return None
    try:
        return Decimal(match.group(1).replace(",", "."))
    except InvalidOperation:
        return None


def weight_in(text: str) -> Decimal | None:
    return _number(_WEIGHT, text)


def distance_in(text: str) -> Decimal | None:
    return _number(_DISTANCE, text)


def _short_reply(text: str) -> str:
    return text.strip().strip("!.。！~ ").strip()


def is_yes(text: str) -> bool:
    reply = _short_reply(text)
    return len(reply) <= 60 and bool(_YES.match(reply)) and not _NO.match(reply)


def is_no(text: str) -> bool:
    reply = _short_reply(text)
    return len(reply) <= 60 and bool(_NO.match(reply))
