"""What a conversation checkpoints. Everything that must survive a restart lives here."""

from __future__ import annotations

import copy
from typing import Annotated, Any, Literal, TypedDict, cast

from langchain_core.messages import AnyMessage, HumanMessage
from langgraph.graph.message import add_messages

from app.agent.cache import CacheEntry
from app.agent.citations import Citation, merge_citations


class Breaker(TypedDict):
    failures: int  # consecutive failed results
    opened_turn: int | None  # turn number the breaker opened in; None = closed


class AgentState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    # The new user message of a turn. The agent node moves it into `messages` after closing
    # any dangling tool calls, so repairs land before it.
    incoming: HumanMessage | None
    verified_user_id: str | None  # written only by the identity tools
    handed_off: bool
    turn_id: str | None  # id of the human message that opened the current turn
    turn_number: int
    turn_steps: int  # model calls in the current turn
    turn_tool_calls: dict[str, int]  # calls per tool in the current turn
    repeats: dict[str, int]  # (tool, args, result) fingerprint -> times seen this turn
    breakers: dict[str, Breaker]
    force_answer: Literal["repeat", "budget", "stagnation"] | None
    confirmation: Literal["approve", "reject"] | None
    # Writes of the last model reply the confirm step did not offer, because their rule
    # refuses them as things are: tool_call_id -> the rule's message. The write node
    # records each as that refusal and runs none of them.
    impossible: dict[str, str]
    tool_cache: dict[str, CacheEntry]
    cache_stats: dict[str, int]  # hits and misses this turn
    citations: Annotated[list[Citation], merge_citations]
    stale_rounds: int  # tool rounds this turn that added nothing new
    summary: str | None  # what the folded-away messages said
    archived_count: int  # messages moved to the transcript archive
    summary_failures: int
    preferences: dict[str, str]  # this turn's remembered preferences: {"key", "text"}
    # The calls of the last model reply the breakers refuse: tool_call_id -> why
    # ("breaker_open", "call_cap"). Decided once, by the agent node; routing and the tool
    # nodes read it.
    refused: dict[str, str]


# What a turn resets its fields to, which is also what each reads as while the state never
# had it (every reader defaults to these): a new thread's first turn need not write them,
# five rows and three blobs fewer (`changes_only`).
UNSET_READS_AS: dict[str, Any] = {
    "turn_tool_calls": {},
    "repeats": {},
    "force_answer": None,
    "confirmation": None,
    "cache_stats": {"hits": 0, "misses": 0},
    "stale_rounds": 0,
    # A turn runs only while the agent holds the thread (a queued or held thread stores
    # the message with no run), so a handoff an earlier turn made has been answered by a
    # person and handed back: the agent must not go on saying a person has it.
    "handed_off": False,
}


def fresh_turn_fields(turn_id: str, turn_number: int) -> dict[str, Any]:
    return {
        "turn_id": turn_id,
        "turn_number": turn_number,
        "turn_steps": 0,
        **copy.deepcopy(UNSET_READS_AS),
    }


def applied(state: AgentState, update: dict[str, Any]) -> AgentState:
    """The state a node would see after `update`, with the channels' reducers: for a node
    that acts on its own bookkeeping before it returns both."""
    if not update:
        return state
    merged: dict[str, Any] = {**state, **update}
    if "messages" in update:
        current: list[Any] = list(state.get("messages") or [])
        merged["messages"] = add_messages(current, update["messages"])
    if "citations" in update:
        merged["citations"] = merge_citations(state.get("citations"), update["citations"])
    return cast(AgentState, merged)


def changes_only(state: AgentState, update: dict[str, Any]) -> dict[str, Any]:
    """`update` without the keys that would not change the state. Every key a node returns
    is a checkpoint write row, and a changed dict or list channel is re-serialised into a
    new blob, so the bookkeeping fields that stay as they were are left out, and so are
    fields the state never had set to what their absence reads as."""
    out: dict[str, Any] = {}
    for key, value in update.items():
        if key == "messages" or key == "citations":  # reducers: an empty update is no change
            if value:
                out[key] = value
        elif key in state:
            if state.get(key) != value:
                out[key] = value
        elif key not in UNSET_READS_AS or UNSET_READS_AS[key] != value:
            out[key] = value
    return out
