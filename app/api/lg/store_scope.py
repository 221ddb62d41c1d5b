"""Which store namespaces a caller may use, and where each lives.

A caller sees only their own: `["users", <their user id>, ...]`. Under it, the namespace
`["users", <user id>, "memory"]` is the agent's memory of a customer (what the
`remember_preference` tool stores, in the store namespace `("memory", <customer id>)`,
app/memory/store.py); every other one is the caller's own items, stored as named. Any
other namespace is a 404, the same as one that does not exist, so another customer's
cannot be told from nothing; a search or a listing over a wider prefix (`[]`, `["users"]`)
sees only the caller's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.api.lg.schemas import MAX_NAMESPACE_DEPTH
from app.errors import NotFound
from app.identity import Principal
from app.memory.store import namespace as memory_namespace

USERS = "users"
MEMORY = "memory"
MAX_LABEL = 64


def not_found() -> NotFound:
    return NotFound("namespace not found", code="namespace_not_found")


@dataclass(frozen=True)
class Place:
    """A namespace the caller may use: the agent's memory, or the caller's items."""

    memory: bool
    stored: tuple[str, ...]  # the store's own namespace for it


def _labels(namespace: Sequence[str]) -> tuple[str, ...]:
    labels = tuple(namespace)
    if len(labels) > MAX_NAMESPACE_DEPTH or any(
        not label or len(label) > MAX_LABEL or "." in label for label in labels
    ):
        raise not_found()
    return labels


def has_memory(user: Principal) -> bool:
    """A customer's own; a guest's conversations write to the customer they prove to be,
    who reads it with their own token (as GET /me/memory)."""
    return user.role == "customer"


def root(user: Principal) -> tuple[str, str]:
    return (USERS, user.user_id)


def place(user: Principal, namespace: Sequence[str]) -> Place:
    """The place of one namespace (put, get, delete); NotFound unless it is the caller's."""
    labels = _labels(namespace)
    if labels[:2] != root(user):
        raise not_found()
    if labels[2:3] == (MEMORY,):
        if len(labels) > 3 or not has_memory(user):
            raise not_found()
        return Place(memory=True, stored=memory_namespace(user.user_id))
    return Place(memory=False, stored=labels)


@dataclass(frozen=True)
class Visible:
    """What a prefix covers of the caller's: the memory, and the items under `items`."""

    memory: bool
    items: tuple[str, ...] | None


def visible(user: Principal, prefix: Sequence[str]) -> Visible:
    """The caller's part of a search or listing prefix; NotFound when it names someone
    else's (or nothing of the caller's) namespace."""
    labels = _labels(prefix)
    mine = root(user)
    if labels == mine[: len(labels)]:  # [], ["users"], ["users", <id>]: all of the caller's
        return Visible(memory=has_memory(user), items=mine)
    if labels[:2] != mine:
        raise not_found()
    if labels[2] == MEMORY:
        if len(labels) > 3 or not has_memory(user):
            raise not_found()
        return Visible(memory=True, items=None)
    return Visible(memory=False, items=labels)


def shown(user: Principal, stored: tuple[str, ...]) -> list[str]:
    """A stored namespace as the caller names it."""
    if stored == memory_namespace(user.user_id):
        return [USERS, user.user_id, MEMORY]
    return list(stored)
