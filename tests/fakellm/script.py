"""Scripted policies: a queue of replies, and a router giving each conversation its own."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from tests.fakellm.types import ChatRequest, Policy, Reply

Step = Reply | Callable[[ChatRequest], Reply]


class ScriptExhausted(RuntimeError):
    """More requests arrived than the script has steps."""


class Script:
    """Answers the n-th request with the n-th step: a fixed `Reply`, or a callable that
    reads the request (e.g. the last tool result) and builds one."""

    def __init__(self, steps: Iterable[Step], *, then: Policy | None = None) -> None:
        self._steps = list(steps)
        self._then = then  # answers once the steps run out; None: ScriptExhausted
        self._next = 0
        self._lock = threading.Lock()

    @property
    def done(self) -> bool:
        return self._next >= len(self._steps)

    def __call__(self, request: ChatRequest) -> Reply:
        with self._lock:
            index = self._next
            if index < len(self._steps):
                self._next += 1
        if index >= len(self._steps):
            if self._then is not None:
                return self._then(request)
            raise ScriptExhausted(f"script of {len(self._steps)} steps got request {index + 1}")
        step = self._steps[index]
        return step if isinstance(step, Reply) else step(request)


def first_user_text(request: ChatRequest) -> str:
    return request.first_user_text()


class Router:
    """One policy per conversation, built by `factory` the first time its key is seen.

    The default key is the first user message, so it only works while the window the
    model is sent still starts with it; pass `key` when trimming may drop it.
    """

    def __init__(
        self,
        factory: Callable[[ChatRequest], Policy],
        *,
        key: Callable[[ChatRequest], str] = first_user_text,
    ) -> None:
        self._factory = factory
        self._key = key
        self._policies: dict[str, Policy] = {}
        self._lock = threading.Lock()

    @classmethod
    def by_marker(
        cls,
        scenarios: Mapping[str, Callable[[ChatRequest], Policy]],
        *,
        default: Callable[[ChatRequest], Policy] | None = None,
        key: Callable[[ChatRequest], str] = first_user_text,
    ) -> Router:
        """Pick the scenario whose marker (a substring) appears in the first user message."""
        return cls(_MarkerFactory(dict(scenarios), default), key=key)

    @property
    def conversations(self) -> dict[str, Policy]:
        return dict(self._policies)

    def __call__(self, request: ChatRequest) -> Reply:
        conversation = self._key(request)
        with self._lock:
            policy = self._policies.get(conversation)
            if policy is None:
                policy = self._policies[conversation] = self._factory(request)
        return policy(request)


@dataclass(frozen=True)
class _MarkerFactory:
    scenarios: dict[str, Callable[[ChatRequest], Policy]]
    default: Callable[[ChatRequest], Policy] | None

    def __call__(self, request: ChatRequest) -> Policy:
        text = request.first_user_text()
        for marker, build in self.scenarios.items():
            if marker in text:
                return build(request)
        if self.default is None:
            raise LookupError(f"no scenario marker in first user message {text[:80]!r}")
        return self.default(request)
