"""Everything the demo model says, in English and Chinese.

`CONFIRM_MARK` ends every request for a yes, so a later "yes" can be read as the answer to
it by looking at the conversation alone.
"""

from __future__ import annotations

from typing import Literal

Lang = Literal["en", "zh"]

CONFIRM_MARK = {"en": "Please reply yes to confirm.", "zh": "请回复“确认”继续。"}

CAPABILITIES = {
    "en": (
        "I can check where an order is, list your orders, estimate shipping, cancel a pending "
        "order, change a pending order's address, start a return, answer questions about our "
        'policies, or pass you to a human colleague. Try: "where is my order #W1234567?"'
    ),
    "zh": (
        "我可以查询订单状态、列出您的订单、估算运费、取消未发货的订单、修改未发货订单的地址、"
        "办理退货、解答政策问题，或为您转接人工客服。例如：“我的订单 #W1234567 到哪了？”"
    ),
}

_TEXTS: dict[str, dict[Lang, str]] = {
    "greeting": {
        "en": "Hi! I'm the shop's assistant. " + CAPABILITIES["en"],
        "zh": "您好！我是商店的客服助手。" + CAPABILITIES["zh"],
    },
    "demo": {
        "en": (
            "I'm the built-in demo model, so I only understand a few kinds of requests. "
            + CAPABILITIES["en"]
        ),
        "zh": "我是内置的演示模型，只能理解几类请求。" + CAPABILITIES["zh"],
    },
    "guest_note": {
        "en": (
            " To look at your orders I'll first need the email address on your account, and "
            "the code I'll send there."
        ),
        "zh": "查看订单前，我需要您账户的邮箱地址，并向该邮箱发送验证码以核实身份。",
    },
    "ask_email": {
        "en": (
            "Happy to help with that. First I need to verify who you are: what is the email "
            "address on your account? I'll send a one-time code there."
        ),
        "zh": "很乐意帮忙。请先提供您账户的邮箱地址，我会向该邮箱发送一次性验证码以核实身份。",
    },
    "code_sent": {
        "en": (
            "If that matches one of our customers, I've just emailed a 6-digit code to the "
            "address on the account. Please type the code here; it is valid for 10 minutes."
        ),
        "zh": "如果与我们的客户信息相符，我们已向该账户的邮箱发送了 6 位验证码，10 分钟内有效。"
        "请在这里输入验证码。",
    },
    "ask_code": {
        "en": (
            "Please type the 6-digit code from the email. If it hasn't arrived, send me your "
            "email address again and I'll send a new one."
        ),
        "zh": "请输入邮件中的 6 位验证码。如果没有收到，请再次发送您的邮箱地址，我会重新发送。",
    },
    "wrong_code": {
        "en": "That code isn't right. Please check the email and type it again.",
        "zh": "验证码不正确，请核对邮件后重新输入。",
    },
    "code_used_up": {
        "en": (
            "That code can't be used any more. Send me your email address again and I'll "
            "send a new one."
        ),
        "zh": "该验证码已失效。请再次发送您的邮箱地址，我会重新发送验证码。",
    },
    "status_only": {
        "en": "{state} For its details, or to change it, I'll first verify you with a code "
        "sent to your email: just ask.",
        "zh": "{state}如需查看详情或修改订单，我会先向您的邮箱发送验证码核实身份，告诉我即可。",
    },
    "no_order_match": {
        "en": (
            "I couldn't find an order with that number and email address. Please check both "
            "and try again."
        ),
        "zh": "没有找到与该订单号和邮箱匹配的订单，请核对后重试。",
    },
    "verified": {
        "en": "Thanks, you're verified. How can I help?",
        "zh": "谢谢，已核实您的身份。请问需要什么帮助？",
    },
    "ask_order_id": {
        "en": (
            "Which order do you mean? Order numbers look like #W1234567. You can also ask me "
            "to list your orders."
        ),
        "zh": "请问是哪个订单？订单号形如 #W1234567。您也可以让我列出您的订单。",
    },
    "orders": {
        "en": 'You have {count} orders: {ids}. Ask me about any of them, e.g. "where is my '
        'order {first}?"',
        "zh": "您共有 {count} 个订单：{ids}。可以问我任何一个，例如：“订单 {first} 到哪了？”",
    },
    "no_orders": {
        "en": "I don't see any orders on your account yet.",
        "zh": "您的账户里还没有订单。",
    },
    "ask_shipping": {
        "en": "For a shipping estimate I need the weight in kg and the distance in km, e.g. "
        '"2 kg, 300 km".',
        "zh": "估算运费需要包裹重量（公斤）和距离（公里），例如：“2公斤 300公里”。",
    },
    "shipping": {
        "en": "Shipping {weight} kg over {distance} km costs {cost}.",
        "zh": "{weight}公斤、{distance}公里的运费是 {cost}。",
    },
    "ask_reason": {
        "en": (
            "I can cancel order {order_id} if it hasn't shipped yet. Why would you like to "
            'cancel it: "ordered by mistake" or "no longer needed"?'
        ),
        "zh": "订单 {order_id} 如果还没发货就可以取消。请问取消原因是“买错了”还是“不需要了”？",
    },
    "confirm_cancel": {
        "en": (
            "To confirm: I'll cancel order {order_id} (reason: {reason}) and refund the full "
            "amount to the original payment method. " + CONFIRM_MARK["en"]
        ),
        "zh": "确认一下：我将取消订单 {order_id}（原因：{reason}），全额退回原支付方式。"
        + CONFIRM_MARK["zh"],
    },
    "cancelled": {
        "en": "Done: order {order_id} is cancelled.{refund}",
        "zh": "已完成：订单 {order_id} 已取消。{refund}",
    },
    "refund": {
        "en": " A refund of {amount} goes back to {method}{timing}.",
        "zh": "{amount} 将退回 {method}{timing}。",
    },
    "refund_gift_card": {"en": " right away", "zh": "，立即到账"},
    "refund_other": {"en": " within 5-7 business days", "zh": "，5-7 个工作日内到账"},
    "ask_address": {
        "en": (
            "What's the new address for order {order_id}? Please write it like: "
            "123 Main St, Apt 4, Austin, TX, USA, 78701."
        ),
        "zh": "订单 {order_id} 的新地址是？请按此格式填写："
        "123 Main St, Apt 4, Austin, TX, USA, 78701。",
    },
    "address_missing": {
        "en": " I couldn't find the {fields} in what you wrote.",
        "zh": "我没能识别出其中的{fields}。",
    },
    "confirm_address": {
        "en": "To confirm: order {order_id} will ship to {address}. " + CONFIRM_MARK["en"],
        "zh": "确认一下：订单 {order_id} 将改寄到 {address}。" + CONFIRM_MARK["zh"],
    },
    "address_changed": {
        "en": "Done: order {order_id} will now ship to {address}.",
        "zh": "已完成：订单 {order_id} 将寄往 {address}。",
    },
    "ask_return_items": {
        "en": "Which items from order {order_id} would you like to return? {items}. Or say "
        '"everything".',
        "zh": "您想退订单 {order_id} 里的哪些商品？{items}。也可以回复“全部”。",
    },
    "not_returnable": {
        "en": "{state} Only delivered orders can be returned.",
        "zh": "{state}只有已送达的订单可以退货。",
    },
    "confirm_return": {
        "en": (
            "To confirm: I'll return {items} from order {order_id} and refund {amount} to "
            "{method}. " + CONFIRM_MARK["en"]
        ),
        "zh": "确认一下：我将为订单 {order_id} 退回 {items}，并退款 {amount} 到 {method}。"
        + CONFIRM_MARK["zh"],
    },
    "returned": {
        "en": (
            "Done: the return of {items} from order {order_id} is requested. You'll get an "
            "email explaining how to send them back; {amount} is refunded to {method} once "
            "they arrive."
        ),
        "zh": "已完成：订单 {order_id} 的 {items} 已申请退货。您会收到寄回说明的邮件，"
        "商品寄到后 {amount} 将退回 {method}。",
    },
    "transferred": {
        "en": "I've passed your conversation to a human colleague; they will reply here.",
        "zh": "已为您转接人工客服，同事会在这里回复您。",
    },
    "handed_off": {
        "en": "A human colleague has this conversation now and will reply here.",
        "zh": "人工客服已接手本次对话，会在这里回复您。",
    },
    "declined": {
        "en": "Okay, I didn't change anything.",
        "zh": "好的，没有做任何更改。",
    },
    "failed": {
        "en": "Sorry, that didn't work: {problem}",
        "zh": "抱歉，操作没有成功：{problem}",
    },
    "lookup_failed": {
        "en": "Sorry, I couldn't look that up: {problem}",
        "zh": "抱歉，没能查到：{problem}",
    },
    "help_answer": {
        "en": "From our help article '{title}':\n{excerpt}",
        "zh": "摘自我们的帮助文章《{title}》：\n{excerpt}",
    },
    "no_help_article": {
        "en": (
            "Our help centre has no article on that, so I won't guess. Would you like me to "
            "pass you to a human colleague?"
        ),
        "zh": "帮助中心没有相关文章，我不便猜测。需要为您转接人工客服吗？",
    },
    "found": {"en": "Here is what I found: {summary}", "zh": "查询结果：{summary}"},
    "cannot_now": {
        "en": (
            "I can't look that up right now. Could you try again in a moment, or ask for a "
            "human colleague?"
        ),
        "zh": "暂时无法查询。请稍后再试，或要求转接人工客服。",
    },
    "confused": {
        "en": "Sorry, I got confused there. Could you say that again in other words? "
        + CAPABILITIES["en"],
        "zh": "抱歉，我没理解。能换个说法吗？" + CAPABILITIES["zh"],
    },
}


def say(key: str, lang: Lang, **values: object) -> str:
    return _TEXTS[key][lang].format(**values)
