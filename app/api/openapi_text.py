"""Words and examples for the OpenAPI document, where a route's own docstring and summary
do not give them (app/api/openapi.py applies them; a route's docstring wins).

Keyed by "METHOD /path" as the document names operations. tests/integration/
test_openapi_contract.py fails when an operation has no summary, description or example.
"""

from __future__ import annotations

from typing import Any

SESSION = "web-3f2a9c"
LG_THREAD = "5b1e6a2c-9f43-4d1e-8c7a-2f0b6d9e1a37"
RUN = "1f0c7d4e-2b3a-6c5d-8e9f-0a1b2c3d4e5f"
CHECKPOINT = "1f1f04b4-5821-676c-8008-08aa7ff51436"

# (summary, description)
OPERATIONS: dict[str, tuple[str, str]] = {
    "GET /healthz": (
        "Liveness",
        "200 while the process serves HTTP; touches nothing else (see /readyz).",
    ),
    "POST /auth/demo": (
        "Demo sign-in: a bearer token",
        "APP_ENV=dev only (404 otherwise). A token for a customer id, a new guest, or a "
        "member of staff (`staff-...`); rate-limited per client like failed sign-ins.",
    ),
    "POST /threads": (
        "Start a thread",
        "A new conversation for the caller; its `id` is the session id every other "
        "/threads route takes. Counted against the threads-per-hour limit.",
    ),
    "GET /threads": (
        "The caller's threads, most recently active first",
        "One page of `limit`; pass `next_cursor` as `cursor` for the next.",
    ),
    "GET /threads/{session_id}/history": (
        "The thread's checkpoints, newest first",
        "Each checkpoint a rewind can go back to, with the message that made it. `before` "
        "pages back from a checkpoint id.",
    ),
    "POST /threads/{session_id}/rewind": (
        "Go back to a checkpoint or to just before a message",
        "Send exactly one of `checkpoint_id` (as /history lists them) or `message_id` (as "
        'the state\'s `messages` carry ids). `{"message_id": ...}` rewinds to just before '
        "that message: it and everything after it leave the thread, so the customer can "
        "write it again. The earlier checkpoints stay in history. A message a rewind already "
        "took away (it is only on an older branch) changes nothing, so a retried or late copy "
        "of a rewind never takes the turns after it. 409 while a run holds the thread.",
    ),
    "DELETE /threads/{session_id}": (
        "Delete a thread",
        "The thread, its checkpoints, runs and events go; 204 whether or not it existed "
        "for the caller. 409 while a run holds it.",
    ),
    "GET /threads/{session_id}/runs": (
        "The thread's recent runs, newest first",
        "Status, timings, usage and the checkpoint each run ended on.",
    ),
    "GET /threads/{session_id}/runs/{run_id}": (
        "A run's status, timings and usage",
        "404 for a run that is not this thread's.",
    ),
    "POST /threads/{session_id}/runs/{run_id}/cancel": (
        "Stop a run",
        "The run stops at its next step; a write under way finishes first. 202 at once; "
        "409 when the run has already ended.",
    ),
    "POST /threads/{session_id}/messages": (
        "Post a user message; the answer streams as SSE or returns as JSON",
        "`Accept: text/event-stream` streams the run (run, token, tool_call, tool_result, "
        "interrupt, done); otherwise the finished turn is returned as JSON. A write the "
        "agent wants to make waits for /resume. 409 `thread_busy` while another reply is "
        "in progress (`Retry-After`); 429 past the rate limit or the daily budget.",
    ),
    "POST /threads/{session_id}/resume": (
        "Approve or reject the writes a paused run is waiting on",
        "Answers as /messages does (SSE or JSON). 409 when nothing is waiting.",
    ),
    "GET /me/memory": (
        "What the agent remembers of the caller",
        "The customer's stored preferences, each with when and in which conversation it "
        "was stored. A guest has none.",
    ),
    "DELETE /me/memory/{key}": (
        "Forget one preference",
        "204 whether or not it was stored.",
    ),
    "GET /staff/threads": (
        "Threads waiting for a person or held by one",
        "Staff only (404 for anyone else). `control` picks the queue: `queued` (waiting), "
        "`mine`, `human` (held by anyone) or `all`; oldest waiting first.",
    ),
    "GET /staff/threads/{thread_id}": (
        "A thread's transcript and control history",
        "Staff only. `thread_id` is the full id, `<user id>:<session id>`.",
    ),
    "GET /staff/threads/{thread_id}/control": (
        "Who answers the thread",
        "Staff only: the agent, the queue, or a named person, and the `version` a change "
        "must name.",
    ),
    "POST /staff/threads/{thread_id}/control": (
        "Accept, take over, transfer or release a thread",
        "Staff only. Compare-and-set on `version`: a stale console gets 409 "
        "`version_conflict` and reloads.",
    ),
    "POST /staff/threads/{thread_id}/messages": (
        "A message from the person holding the thread",
        "Staff only, and only by the person who holds the thread (409 otherwise); the "
        "customer sees it on their event stream.",
    ),
    "GET /staff/threads/{thread_id}/events": (
        "The thread's stream, for the console",
        "Server-sent events of the thread's messages and control changes; `Last-Event-ID` "
        "resumes after an event.",
    ),
    "GET /threads/{session_id}/control": (
        "Who answers the caller's thread",
        "The agent, the queue, or a person (by display name).",
    ),
    "GET /threads/{session_id}/events": (
        "The thread's stream, for the customer",
        "Server-sent events of what staff send and of control changes; `Last-Event-ID` "
        "resumes after an event.",
    ),
    "POST /lg/assistants/search": (
        "Search assistants (LangGraph Platform API)",
        "There is one assistant, `agent`: it is listed when the filters match it.",
    ),
    "GET /lg/threads/{thread_id}": (
        "A thread (LangGraph Platform API)",
        "Its metadata, status and values, as the official server shows them.",
    ),
    "DELETE /lg/threads/{thread_id}": (
        "Delete a thread (LangGraph Platform API)",
        "As DELETE /threads/{session_id}: 204, 409 while a run holds it.",
    ),
    "GET /lg/threads/{thread_id}/state": (
        "A thread's current state (LangGraph Platform API)",
        "Values (messages), the pending confirmation if any, and the checkpoint.",
    ),
    "GET /lg/threads/{thread_id}/state/{checkpoint_id}": (
        "A thread's state at a checkpoint (LangGraph Platform API)",
        "404 for a checkpoint that is not this thread's.",
    ),
    "POST /lg/threads/{thread_id}/state/checkpoint": (
        "A thread's state at a checkpoint, by body (LangGraph Platform API)",
        "As GET /state/{checkpoint_id}; a `checkpoint_ns` other than the root's is 404.",
    ),
    "POST /lg/threads/{thread_id}/history": (
        "A thread's states, newest first (LangGraph Platform API)",
        "`limit` states before `before`; history cannot be filtered by metadata.",
    ),
    "GET /lg/threads/{thread_id}/history": (
        "A thread's states, newest first, by query (LangGraph Platform API)",
        "As POST /history.",
    ),
    "POST /lg/threads/{thread_id}/runs": (
        "Start a run in the background (LangGraph Platform API)",
        "A run needs one human message (`input`), a decision on a pending confirmation "
        "(`command.resume`, or `command.goto: __end__` to decline), or a fork "
        "(`checkpoint_id`). Fields cs-agent cannot honour (config, context, breakpoints, "
        "delays, update commands) are refused by name (422). 409 while another run holds "
        "the thread.",
    ),
    "POST /lg/threads/{thread_id}/runs/stream": (
        "Start a run and stream it (LangGraph Platform API)",
        "As POST /runs, streamed as the official server's SSE in the requested `stream_mode`s.",
    ),
    "POST /lg/threads/{thread_id}/runs/wait": (
        "Start a run and wait for its final state (LangGraph Platform API)",
        "As POST /runs; the answer is the thread's values when the run ends.",
    ),
    "GET /lg/threads/{thread_id}/runs": (
        "A thread's runs, newest first (LangGraph Platform API)",
        "Paged by `limit` and `offset`.",
    ),
    "GET /lg/threads/{thread_id}/runs/{run_id}": (
        "A run (LangGraph Platform API)",
        "Status, metadata and timestamps.",
    ),
    "GET /lg/threads/{thread_id}/runs/{run_id}/join": (
        "Wait for a run to end (LangGraph Platform API)",
        "The thread's values when it ends; `cancel_on_disconnect` cancels the run when the "
        "client goes.",
    ),
    "POST /lg/threads/{thread_id}/runs/{run_id}/cancel": (
        "Cancel a run (LangGraph Platform API)",
        "`action=interrupt` (the only one: a run's steps stay in history). 202, or with "
        "`wait=true` the outcome when it has stopped.",
    ),
    "PUT /lg/store/items": (
        "Store an item (LangGraph Platform API)",
        'In one of the caller\'s namespaces, `["users", <user id>, ...]`; '
        '`["users", <user id>, "memory"]` is the agent\'s memory, which holds documented '
        'keys with `{"value": "<one line>"}`. 204.',
    ),
    "DELETE /lg/store/items": (
        "Delete an item (LangGraph Platform API)",
        "204 whether or not it existed.",
    ),
    "POST /lg/store/namespaces": (
        "List the caller's namespaces (LangGraph Platform API)",
        "Filtered by `prefix`, `suffix` and `max_depth`; only the caller's own.",
    ),
    "GET /lg/threads/{thread_id}/runs/{run_id}/stream": (
        "Follow a run's stream (LangGraph Platform API)",
        "Replays after `Last-Event-ID`, then tails the run.",
    ),
    "GET /tool-labels": (
        "What the page says while each tool runs",
        "The labels of the built-in tools and of the actions file's remote tools (the "
        "file's `label`, else the tool's title), as the chat page shows them.",
    ),
    "GET /staff/policies": (
        "Policy versions",
        "Every version with its state (draft, live, candidate with its percent, retired), "
        "who made it and when, its note and its latest test. Staff and admins.",
    ),
    "POST /staff/policies": (
        "Create a draft policy version",
        "Admins only (403 `admin_only` for other staff). The new draft's `version`: its "
        "instructions and procedures never change after this; publish moves its state.",
    ),
    "GET /staff/policies/{version}": (
        "One policy version",
        "Its instructions, procedures, note, state and history of state changes.",
    ),
    "POST /staff/policies/rollback": (
        "Roll back",
        "Admins only. The candidate is retired; with no candidate, the previous live version "
        "becomes live again. Threads on a retired version move to live at their next turn.",
    ),
    "POST /staff/policies/{version}/tests": (
        "Test a version against live",
        "Admins only. Runs the task file's tasks through the service against live and "
        "against this version and compares them as `eval compare` does. 202 with the "
        "test's id; follow it with GET .../tests/{test_id}.",
    ),
    "GET /staff/policies/{version}/tests/{test_id}": (
        "A policy test's status and comparison",
        "`running`, `passed`, `regressed` or `failed`, with the comparison (compare.md).",
    ),
    "POST /staff/policies/{version}/publish": (
        "Publish a version to a share of new conversations",
        "Admins only. `percent` 100 makes it live; fewer makes it the candidate for that "
        "share of new threads. 409 `gate_not_passed` when its latest test regressed or it "
        "was never tested, unless `force` with a `reason` (recorded with who forced it).",
    ),
    "POST /channels/chatwoot/webhook": (
        "Chatwoot agent bot events",
        "Verified by `X-Chatwoot-Signature` (HMAC-SHA256 of `{timestamp}.{body}` with "
        "CHATWOOT_WEBHOOK_SECRET; 401 when wrong or older than 5 minutes). The message is "
        "stored before the 200; the turn runs in the background on any replica.",
    ),
    "POST /channels/email/inbound": (
        "An inbound email (raw RFC 822)",
        "`Authorization: Bearer EMAIL_INBOUND_SECRET` (401 otherwise), `Content-Type: "
        "message/rfc822` (415 otherwise). 202 once stored, also for one it will not answer.",
    ),
    "POST /channels/email/postmark": (
        "An inbound email (Postmark's JSON)",
        "Postmark's inbound webhook body, authenticated with EMAIL_INBOUND_SECRET (Bearer or "
        "Basic password). 202 once stored.",
    ),
}

# Parameter examples, by parameter name (and `in`), for parameters that have none.
PARAMETERS: dict[tuple[str, str], Any] = {
    ("path", "session_id"): SESSION,
    ("path", "run_id"): RUN,
    ("path", "checkpoint_id"): CHECKPOINT,
    ("path", "key"): "refund_preference",
    ("path", "article_id"): "refund-timing",
    ("path", "assistant_id"): "agent",
    ("query", "checkpoint_id"): CHECKPOINT,
    ("query", "before"): CHECKPOINT,
    ("query", "limit"): 20,
    ("query", "q"): "how long do refunds take?",
    ("query", "namespace"): "users.james_evans_5777.notes",
    ("query", "key"): "first",
    ("query", "from"): "2026-11-01T00:00:00Z",
    ("query", "to"): "2026-12-01T00:00:00Z",
    ("query", "group"): "week",
    ("path", "version"): 2,
    ("path", "test_id"): "pt-5f0c2a9e",
}
THREAD_IDS = {"/lg/": LG_THREAD, "/staff/": f"james_evans_5777:{SESSION}"}

# Request body examples, by the body's schema name.
BODIES: dict[str, Any] = {
    "DemoLoginIn": {"user_id": "james_evans_5777", "role": "customer"},
    "MessageIn": {"content": "Where is my order #W2611340?", "client_message_id": "m-1"},
    "ResumeIn": {"decision": "approve"},
    "RewindIn": {"message_id": "2527f6ea-fddb-426c-b10d-e8772cfcbec5"},
    "ControlIn": {"action": "take_over", "version": 3},
    "StaffMessageIn": {"content": "Hi, I'm Ana from support: I'll take it from here."},
    "AssistantSearch": {"graph_id": "agent", "limit": 10},
    "ThreadCreate": {"metadata": {"channel": "web"}},
    "ThreadUpdate": {"metadata": {"topic": "refund"}},
    "ThreadSearch": {"metadata": {"channel": "web"}, "limit": 10},
    "ThreadCount": {"status": "idle"},
    "StateAtCheckpoint": {"checkpoint": {"checkpoint_id": CHECKPOINT}},
    "HistoryQuery": {"limit": 10},
    "RunCreate": {
        "assistant_id": "agent",
        "input": {"messages": [{"role": "user", "content": "Where is my order?"}]},
        "stream_mode": ["messages-tuple", "values"],
    },
    "StorePut": {
        "namespace": ["users", "james_evans_5777", "notes"],
        "key": "first",
        "value": {"text": "prefers email"},
    },
    "StoreDelete": {"namespace": ["users", "james_evans_5777", "notes"], "key": "first"},
    "StoreSearch": {
        "namespace_prefix": ["users", "james_evans_5777"],
        "filter": {"text": {"$ne": ""}},
    },
    "StoreNamespaces": {"prefix": ["users", "james_evans_5777"], "limit": 10},
    "PolicyIn": {
        "instructions": "You are the customer-service agent of an online shop. ...",
        "procedures": [
            {
                "name": "damaged parcel",
                "when": "the customer says an item arrived damaged",
                "steps": "Ask for a photo, then offer a return to the original payment.",
            }
        ],
        "note": "damaged parcels: photo first",
        "parent": 1,
    },
    "TestIn": {"tasks": [{"id": "cancel-pending", "customer_lines": ["cancel #W2611340"]}]},
    "PublishIn": {"percent": 10},
}

# Response examples for the operations that take nothing to show an example of.
RESPONSES: dict[str, Any] = {
    "GET /healthz": {"status": "ok"},
    "POST /threads": {
        "id": "8c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f",
        "created_at": "2026-12-05T01:00:00Z",
    },
    "GET /readyz": {"status": "ready"},
    "GET /metrics": "# TYPE cs_agent_turns_total counter\ncs_agent_turns_total 42\n",
    "GET /auth/demo/customers": [
        {"user_id": "james_evans_5777", "name": "James Evans", "email": "james@example.com"}
    ],
    "GET /me/memory": [{"key": "refund_preference", "value": "store credit"}],
    "GET /lg/info": {"version": "0.1.0", "flags": {"assistants": True, "crons": False}},
    "GET /tool-labels": {"get_order_details": {"label": "Looking up {order} …"}},
    "GET /staff/policies": {
        "items": [{"version": 1, "state": "live", "percent": None, "note": "as shipped"}]
    },
    "POST /staff/policies/rollback": {"live": 1, "retired": [2]},
    "POST /channels/chatwoot/webhook": {"status": "accepted"},
    "POST /channels/email/inbound": {"status": "stored"},
    "POST /channels/email/postmark": {"status": "stored"},
}
