"""The simulated customer: an OpenAI-compatible chat model that plays the task's customer.

It sees the agent's words as the other side of the chat and answers one line at a time. The
runner reads its lines; a line with STOP ends the conversation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

STOP = "###STOP###"
GREETING = "Hi! How can I help you today?"
# How the runner puts a pending confirmation to the customer (the scripted customer spots it).
CONFIRM_QUESTION = "Shall I go ahead? Please answer yes or no."
INBOX_NOTE = "[A new email arrived in your inbox. Subject: {subject}. Body: {body}]"

RULES = """\
You are role-playing a customer of an online shop, chatting with the shop's customer \
service agent. You are the customer, never the agent.

This is who you are and what you want (written by the person who set up this test):
<situation>
{instruction}
</situation>

How to play:
- Each reply is the customer's next chat message: one short message, plain text, no \
narration.
- Reveal details (your name, email, zip code, order numbers, what you want) only when the \
agent needs them for the step at hand. Do not tell the whole situation at once.
- Use only facts from the situation. If the agent asks for something it does not give, \
say you don't know or don't remember it. Never make up ids, numbers or addresses.
- Put things in your own words instead of copying the situation's sentences.
- Keep to the personality and preferences the situation describes.
- When the agent asks you to confirm an action, say yes only if it is exactly what you \
want; otherwise say no and what you want instead.
- Once your goal is reached, or it clearly cannot be reached, reply with ###STOP### and \
nothing else.{guest_rule}"""
GUEST_RULE = """
- You are not signed in. When the agent emails you a verification code, the email is \
shown to you in the chat as a note from your inbox; type the code when the agent asks \
for it."""

_YES = re.compile(
    r"^\W*(yes|yeah|yep|yup|sure|ok|okay|confirm|confirmed|correct|please do|please proceed|"
    r"go ahead|proceed|that's right|that is right|sounds good|do it|absolutely|definitely)\b",
    re.IGNORECASE,
)
_NO = re.compile(
    r"\b(no|nope|not|don't|do not|cancel that|wait|stop|instead|hold on|rather)\b", re.I
)


def is_stop(line: str) -> bool:
    return STOP in line


def is_yes(answer: str) -> bool:
    """A clear yes to a confirmation; anything hedged or negative counts as no."""
    head = answer.strip()
    if not _YES.match(head):
        return False
    rest = _YES.sub("", head, count=1)
    return not _NO.search(rest)


def system_prompt(instruction: str, *, guest: bool) -> str:
    return RULES.format(instruction=instruction, guest_rule=GUEST_RULE if guest else "")


@dataclass(frozen=True)
class Completion:
    text: str
    input_tokens: int = 0
    output_tokens: int = 0


class ChatModel(Protocol):
    """Whatever answers for the customer: a model behind an OpenAI-compatible API, or the
    built-in scripted customer."""

    async def complete(self, messages: list[dict[str, Any]]) -> Completion: ...


@dataclass(frozen=True)
class OpenAIChat:
    client: AsyncOpenAI
    model: str
    temperature: float | None = 0.0

    async def complete(self, messages: list[dict[str, Any]]) -> Completion:
        options: dict[str, Any] = {}
        if self.temperature is not None:
            options["temperature"] = self.temperature
        completion = await self.client.chat.completions.create(
            model=self.model,
            messages=cast("list[ChatCompletionMessageParam]", messages),
            **options,
        )
        usage = completion.usage
        choice = completion.choices[0] if completion.choices else None
        return Completion(
            (choice.message.content or "") if choice else "",
            usage.prompt_tokens if usage else 0,
            usage.completion_tokens if usage else 0,
        )


@dataclass
class SimulatedCustomer:
    """One conversation's customer. `messages` is its own view: the agent speaks as `user`."""

    chat: ChatModel
    instruction: str
    guest: bool = False
    messages: list[dict[str, Any]] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0

    def __post_init__(self) -> None:
        prompt = system_prompt(self.instruction, guest=self.guest)
        self.messages = [{"role": "system", "content": prompt}]

    async def respond(self, agent_text: str) -> str:
        """The customer's answer to what the agent just said."""
        self.messages.append({"role": "user", "content": agent_text or "(no answer)"})
        completion = await self.chat.complete(list(self.messages))
        self.input_tokens += completion.input_tokens
        self.output_tokens += completion.output_tokens
        line = completion.text.strip()
        self.messages.append({"role": "assistant", "content": line})
        return line or STOP
