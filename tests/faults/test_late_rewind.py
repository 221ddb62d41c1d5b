"""A late copy of a rewind never takes back a turn that came after it.

Found by the 30-minute soak (seed 7, with network faults): a rewind request was held up on
a faulty path; the client retried it, had its answer, and sent the edited question, whose
answer was acknowledged. Then the held-up copy arrived: a rewind by `message_id` searched the
whole history, old branch included, found the message there and rewound again, so the
acknowledged answer was gone from the transcript. A rewind only looks along the thread's
current branch: a message that is no longer on it was already rewound away, and the rewind
changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

from tests.faults import procs


def contents(base: str, headers: dict[str, str]) -> list[str]:
    state = httpx.get(base + "/state", headers=headers, timeout=30).json()
    return [m["content"] for m in state["messages"] if m["role"] == "user"]


def say(base: str, headers: dict[str, str], text: str) -> None:
    answered = httpx.post(base + "/messages", json={"content": text}, headers=headers, timeout=30)
    assert answered.status_code == 200 and answered.json()["status"] == "completed"


def test_a_rewind_that_arrives_again_after_the_next_turn_changes_nothing(
    service: procs.ServiceProcess, auth_headers: Callable[[str], dict[str, str]]
) -> None:
    headers = auth_headers("cust_rewind")
    base = service.url + "/threads/late-rewind"
    say(base, headers, "first question")
    say(base, headers, "second question")
    state = httpx.get(base + "/state", headers=headers, timeout=30).json()
    second = next(m["id"] for m in state["messages"] if m["content"] == "second question")
    rewind = {"message_id": second}

    first_copy = httpx.post(base + "/rewind", json=rewind, headers=headers, timeout=30)
    assert first_copy.status_code == 200
    assert contents(base, headers) == ["first question"]
    # The client's retry of a rewind whose answer it lost: the same answer, nothing more.
    retry = httpx.post(base + "/rewind", json=rewind, headers=headers, timeout=30)
    assert retry.status_code == 200
    assert [m["content"] for m in retry.json()["messages"]] == [
        m["content"] for m in first_copy.json()["messages"]
    ]

    say(base, headers, "second question, edited")
    acknowledged = contents(base, headers)
    assert acknowledged == ["first question", "second question, edited"]

    late_copy = httpx.post(base + "/rewind", json=rewind, headers=headers, timeout=30)
    assert late_copy.status_code == 200
    assert contents(base, headers) == acknowledged

    # A message id this thread never had is still an error.
    unknown = httpx.post(base + "/rewind", json={"message_id": "nope"}, headers=headers, timeout=30)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "message_not_found"
