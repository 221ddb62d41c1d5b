"""The simulated customer's instruction for a recorded conversation.

With a user-simulator model (USER_SIM_*), the model writes it from the transcript (with the
personal data already replaced): what the customer wanted and knew, never what the agent
did. Offline it is a template that names the customer, their email and zip code (the
scripted customer gives them when asked) and quotes what they said; the scripted customer
then says those lines, verbatim and in order (the task's `customer_lines`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.eval.simulator import STOP, ChatModel

WRITER_PROMPT = """\
You write instructions for testing a shop's customer-service agent. Below is a real chat \
between a customer and the agent. Someone will play this customer in a test, so write, in \
the second person ("You are ..."), who the customer is and what they wanted: their goal, \
the facts they knew and gave (name, email, zip code, order ids, items, addresses), their \
preferences, and how they answered when asked to confirm a change. Describe what the \
customer wanted and what they knew, never what the agent did or said, and do not say how \
the conversation ended. Plain text, one paragraph, at most 150 words."""


@dataclass(frozen=True)
class Customer:
    user_id: str
    name: str
    email: str
    zip: str


def template(customer: Customer, lines: Sequence[str], *, handed_off: bool) -> str:
    said = [line for line in lines if line != STOP and line.lower() not in ("yes", "no")]
    answers = [line.lower() for line in lines if line.lower() in ("yes", "no")]
    parts = [
        f"You are {customer.name} (user id {customer.user_id}, email {customer.email}, zip "
        f"code {customer.zip}). You want what you wanted in a conversation you had with the "
        "shop's customer service, where you said, in this order:"
    ]
    parts += [f'{n}. "{line}"' for n, line in enumerate(said, start=1)]
    if answers:
        parts.append(
            f"When asked to confirm a change you answered, in order: {', '.join(answers)}."
        )
    if STOP in lines:
        parts.append("You left before answering the last confirmation.")
    if handed_off:
        parts.append("You were handed over to a person.")
    return "\n".join(parts)


def transcript_text(turns: Sequence[tuple[str, str]]) -> str:
    return "\n".join(f"{speaker.upper()}: {text}" for speaker, text in turns)


async def written_by_model(
    chat: ChatModel, customer: Customer, turns: Sequence[tuple[str, str]]
) -> str:
    """The user-simulator model's instruction, with who the customer is put first (the
    scripted customer and the identity check read the email and zip code from it)."""
    completion = await chat.complete(
        [
            {"role": "system", "content": WRITER_PROMPT},
            {"role": "user", "content": transcript_text(turns)},
        ]
    )
    who = (
        f"You are {customer.name} (user id {customer.user_id}, email {customer.email}, zip "
        f"code {customer.zip})."
    )
    return f"{who}\n{completion.text.strip()}"
