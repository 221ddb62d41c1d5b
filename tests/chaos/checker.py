"""Every promise, checked once the system has settled: each invariant is a count that must be 0.

The database is read directly (a fresh connection to Postgres, not through the service);
transcripts and pending confirmations are read as the customer sees them, through the
balancer (GET /threads/{id}/state with the customer's token).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.chaos.actions import IDEMPOTENT, ActionServers
from tests.chaos.faults import DATABASE_FAULTS, NET_DATABASE_FAULTS, REPLICA_FAULTS, Fault
from tests.chaos.receiver import WebhookReceiver
from tests.chaos.records import Action, Records, RunSeen
from tests.chaos.topology import KERNEL_GIVES_UP_S
from tests.faults import procs
from tests.scale.topology import bearer

# A 5xx this close to a database or replica fault's end is still that fault's.
GRACE_S = 1.0
EXAMPLES = 5


@dataclass
class Invariant:
    name: str
    promise: str
    count: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, example: str, n: int = 1) -> None:
        self.count += n
        if len(self.examples) < EXAMPLES:
            self.examples.append(example)


class Checker:
    def __init__(
        self,
        pg: procs.PrivatePostgres,
        url: str,
        records: Records,
        faults: list[Fault],
        receiver: WebhookReceiver | None = None,
        actions: ActionServers | None = None,
    ) -> None:
        self.pg = pg
        self.receiver = receiver
        self.actions = actions
        self.url = url
        self.records = records
        self.faults = faults
        self.results: list[Invariant] = []
        self._cache: dict[str, list[str] | None] | None = None
        # thread: what the database and its clients say of it, for a violation's report
        self.evidence: dict[str, list[str]] = {}
        self.info: Counter[str] = Counter()  # what the report says beside the counts

    def _evidence(self, thread: str) -> None:
        if thread in self.evidence:
            return
        lines = [f"thread {thread}", "runs (database):"]
        lines += [
            f"  {row}"
            for row in self.pg.query(
                "SELECT run_id, status, client_message_id, owner, created_at, finished_at"
                " FROM runs WHERE thread_id = %s ORDER BY created_at",
                (thread,),
            )
        ]
        lines.append("lease (database):")
        lines += [
            f"  {row}"
            for row in self.pg.query(
                "SELECT generation, owner, run_id, expires_at, now(), control"
                " FROM thread_leases WHERE thread_id = %s",
                (thread,),
            )
        ]
        lines.append("writes (database):")
        lines += [
            f"  {row}"
            for row in self.pg.query(
                "SELECT idempotency_key, tool_name, ok, left(outcome, 80), created_at"
                " FROM audit_log WHERE thread_id = %s ORDER BY id",
                (thread,),
            )
        ]
        lines.append("runs (as the client read them):")
        for seen_thread, run in self.records.runs:
            if seen_thread == thread:
                ids = [(s.after, s.ids[:3], s.ids[-3:]) for s in run.streams]
                lines.append(f"  {run.run_id} done={run.done} streams={ids}")
        self.evidence[thread] = lines

    def run(self) -> list[Invariant]:
        with httpx.Client(base_url=self.url, timeout=30) as http:
            self.http = http
            for check in self._checks():
                check()
        return self.results

    def _checks(self) -> list[Callable[[], None]]:
        return [
            self.writes_twice,
            self.told_failed_but_ran,
            self.approved_not_done,
            self.declined_done,
            self.forks,
            self.acknowledged_missing,
            self.messages_twice,
            self.running_without_lease,
            self.lease_without_process,
            self.event_id_gaps,
            self.leaks,
            self.unexcused_5xx,
            self.deleted_left_behind,
            self.never_finished,
            self.webhooks_lost,
            self.agent_while_held,
            *self._action_checks(),
        ]

    def _new(self, name: str, promise: str) -> Invariant:
        invariant = Invariant(name, promise)
        self.results.append(invariant)
        return invariant

    def _state(self, customer: str, session: str) -> httpx.Response:
        return self.http.get(f"/threads/{session}/state", headers=bearer(customer))

    # --- writes --------------------------------------------------------------------------

    def writes_twice(self) -> None:
        v = self._new(
            "write_executed_twice",
            "a write executed twice for one approval or one idempotency key"
            " (tool executions, orders, refunds, audit, hand-over tickets)",
        )
        for key, n in self.pg.query(
            "SELECT idempotency_key, count(*) FROM audit_log WHERE ok"
            " GROUP BY 1 HAVING count(*) > 1"
        ):
            v.add(f"audit_log: {n} successful rows for key {key}")
        for order, n in self.pg.query(
            "SELECT arguments->>'order_id', count(*) FROM tool_executions"
            " WHERE ok AND tool_name = 'cancel_pending_order' AND outcome NOT LIKE 'Error:%%'"
            " GROUP BY 1 HAVING count(*) > 1"
        ):
            v.add(f"tool_executions: order {order} cancelled by {n} keys")
        for order, n in self.pg.query(
            "SELECT order_id, count(*) FROM payment_transactions WHERE transaction_type = 'refund'"
            " GROUP BY 1 HAVING count(*) > 1"
        ):
            v.add(f"payment_transactions: order {order} refunded {n} times")
        for thread, n in self.pg.query(
            "SELECT thread_id, count(*) FROM handoff_tickets GROUP BY 1 HAVING count(*) > 1"
        ):
            v.add(f"handoff_tickets: {n} tickets for thread {thread}")

    def told_failed_but_ran(self) -> None:
        v = self._new(
            "write_told_failed_but_ran",
            'a write that committed, then recorded and told as failed ("nothing was'
            ' changed") under the same key: its COMMIT ran, the answer was lost. A failure'
            " before the commit was true (a try rolled back, the key run again later)",
        )
        for key, thread, tool in self.pg.query(
            "SELECT e.idempotency_key, e.thread_id, e.tool_name FROM tool_executions e"
            " WHERE e.ok AND EXISTS (SELECT 1 FROM audit_log a"
            "  WHERE a.idempotency_key = e.idempotency_key AND NOT a.ok"
            "  AND a.created_at > e.created_at AND a.outcome LIKE %s)",
            ("%nothing was changed%",),
        ):
            v.add(f"{thread}: {tool} ran under {key}, and was told as not done")
            self._evidence(thread)

    def approved_not_done(self) -> None:
        v = self._new(
            "approved_write_lost",
            "an approved write (or one asked for with confirmation off and acknowledged) that"
            " neither ran nor is still pending where the customer can see it",
        )
        for w in self.records.writes:
            if w.decision == "reject":
                continue
            if w.thread in self.records.deleted:
                continue  # a deleted thread's pending confirmation is gone with it
            if w.order == "handoff":
                rows = self.pg.query(
                    "SELECT count(*) FROM handoff_tickets WHERE thread_id = %s", (w.thread,)
                )
                if rows[0][0] > 0:
                    self.info["hand-overs that ran"] += 1
                    continue
                state = self._state(w.customer, w.session)
                if state.status_code == 200 and _failure_shown(
                    state.json(), "transfer_to_human_agents"
                ):
                    self.info["hand-overs that failed, the failure shown to the customer"] += 1
                    continue
                v.add(f"{w.thread}: hand-over acknowledged, no ticket")
                self._evidence(w.thread)
                continue
            if self._cancelled_by(w.thread, w.order):
                self.info["approved writes that ran"] += 1
                continue
            state = self._state(w.customer, w.session)
            if state.status_code == 200 and state.json().get("pending"):
                self.info["approved writes still pending, shown to the customer"] += 1
                continue
            if state.status_code == 200 and _failure_shown(state.json(), "cancel_pending_order"):
                # The write failed (the database went away under it), and the customer was
                # told so in the conversation: nothing was lost without a word.
                self.info["approved writes that failed, the failure shown to the customer"] += 1
                continue
            v.add(f"{w.thread}: {w.decision} of cancelling {w.order}: not run, not pending")
            self._evidence(w.thread)

    def _cancelled_by(self, thread: str, order: str) -> bool:
        rows = self.pg.query(
            "SELECT count(*) FROM tool_executions WHERE thread_id = %s AND ok"
            " AND tool_name = 'cancel_pending_order' AND arguments->>'order_id' = %s"
            " AND outcome NOT LIKE 'Error:%%'",
            (thread, order),
        )
        status = self.pg.query("SELECT status FROM orders WHERE id = %s", (order,))
        return bool(rows[0][0] > 0 and status[0][0] == "cancelled")

    def declined_done(self) -> None:
        v = self._new("declined_write_ran", "a write the customer declined that ran")
        for w in self.records.writes:
            if w.decision != "reject":
                continue
            status = self.pg.query("SELECT status FROM orders WHERE id = %s", (w.order,))
            if status[0][0] != "pending":
                v.add(f"{w.thread}: declined, order {w.order} is {status[0][0]}")

    # --- checkpoints and transcripts -----------------------------------------------------

    def forks(self) -> None:
        v = self._new(
            "checkpoint_fork",
            "a checkpoint chain that forks (two children of one checkpoint in one namespace;"
            " a rewind's copy, source 'fork', is the one child allowed beside them)",
        )
        for thread, ns, parent, n in self.pg.query(
            "SELECT thread_id, checkpoint_ns, parent_checkpoint_id, count(*) FROM checkpoints"
            " WHERE parent_checkpoint_id IS NOT NULL"
            " AND coalesce(metadata->>'source', '') <> 'fork'"
            " GROUP BY 1, 2, 3 HAVING count(*) > 1"
        ):
            v.add(f"{thread} ns={ns!r}: {n} children of {parent}")
            self._evidence(thread)

    def _transcripts(self) -> dict[str, list[str] | None]:
        """The user messages of every thread a turn was acknowledged on (None: no 200)."""
        if self._cache is not None:
            return self._cache
        seen: dict[str, list[str] | None] = {}
        for turn in self.records.turns:
            if turn.thread in seen or turn.thread in self.records.deleted:
                continue
            state = self._state(turn.customer, turn.session)
            seen[turn.thread] = (
                [m["content"] for m in state.json()["messages"] if m["role"] == "user"]
                if state.status_code == 200
                else None
            )
        self._cache = seen
        return seen

    def acknowledged_missing(self) -> None:
        v = self._new(
            "acknowledged_turn_missing",
            "a turn acknowledged to a client (done completed) missing from its transcript",
        )
        transcripts = self._transcripts()
        for turn in self.records.turns:
            if turn.thread in self.records.deleted:
                continue
            if (turn.thread, turn.content) in self.records.superseded:
                continue  # the client rewound past it
            said = transcripts.get(turn.thread)
            if said is None or turn.content not in said:
                v.add(f"{turn.thread}: {turn.content!r}")
                self._evidence(turn.thread)

    def messages_twice(self) -> None:
        v = self._new("message_stored_twice", "a customer message stored twice in one transcript")
        for thread, said in self._transcripts().items():
            for content in set(said or []):
                if (said or []).count(content) > 1:
                    v.add(f"{thread}: {content!r}")

    # --- runs and leases -----------------------------------------------------------------

    def running_without_lease(self) -> None:
        v = self._new("run_running_without_lease", "a run left running with no live lease")
        for run, thread in self.pg.query(
            "SELECT r.run_id, r.thread_id FROM runs r WHERE r.status = 'running' AND NOT EXISTS"
            " (SELECT 1 FROM thread_leases l WHERE l.thread_id = r.thread_id"
            "  AND l.run_id = r.run_id AND l.expires_at > now())"
        ):
            v.add(f"{thread}: run {run}")
            self._evidence(thread)

    def lease_without_process(self) -> None:
        v = self._new(
            "lease_held_by_no_process",
            "a lease held (a run id on it) by no live process: expired, or its run not running",
        )
        for thread, run, expired in self.pg.query(
            "SELECT l.thread_id, l.run_id, l.expires_at < now() FROM thread_leases l"
            " WHERE l.run_id IS NOT NULL AND (l.expires_at < now() OR NOT EXISTS"
            " (SELECT 1 FROM runs r WHERE r.run_id = l.run_id AND r.status = 'running'))"
        ):
            v.add(f"{thread}: run {run} ({'expired' if expired else 'run not running'})")
            self._evidence(thread)

    def event_id_gaps(self) -> None:
        v = self._new(
            "event_id_gap_or_duplicate",
            "a gap or a duplicate in what a client got of a run over all its streams: an id"
            " not above the last one (or the stream's Last-Event-ID), or a known answer"
            " not received whole, each piece once",
        )
        for thread, run in self.records.runs:
            problem = id_problem(run)
            if problem:
                v.add(f"{thread} run {run.run_id}: {problem}")
                self._evidence(thread)

    def leaks(self) -> None:
        v = self._new(
            "cross_customer_data",
            "a reply to one customer that contains another customer's data (ids, emails)",
        )
        for leak in self.records.leaks:
            v.add(f"{leak.customer} was sent {leak.found} of {leak.owner} ({leak.thread})")

    def unexcused_5xx(self) -> None:
        v = self._new(
            "http_5xx_while_up",
            "a 5xx while the database was up and at least one replica was alive (a 5xx is"
            f" excused while a database or replica fault, or {GRACE_S:.0f} s after it, overlaps"
            " the request)",
        )
        windows = [
            (f.started, (f.ended or f.started) + GRACE_S)
            for f in self.faults
            if f.kind in DATABASE_FAULTS or f.kind in REPLICA_FAULTS
        ]
        # A connection a network fault stranded fails the request on it until the
        # replica's kernel gives it up, after the fault too.
        windows += [
            (f.started, (f.ended or f.started) + KERNEL_GIVES_UP_S + GRACE_S)
            for f in self.faults
            if f.kind in NET_DATABASE_FAULTS and f.target.endswith(" db")
        ]
        for e in self.records.errors_5xx:
            if not any(start <= e.answered and e.sent <= end for start, end in windows):
                at = e.sent - self.records.started
                v.add(f"t={at:.1f}s {e.method} {e.path}: {e.status} {e.body[:120]!r}")

    def deleted_left_behind(self) -> None:
        v = self._new(
            "deleted_thread_left_behind",
            "a deleted thread (204) whose state, checkpoints or runs are still there",
        )
        for thread, (customer, session, _) in self.records.deleted.items():
            rows = self.pg.query(
                "SELECT (SELECT count(*) FROM checkpoints WHERE thread_id = %s)"
                " + (SELECT count(*) FROM runs WHERE thread_id = %s)"
                " + (SELECT count(*) FROM threads WHERE thread_id = %s)",
                (thread, thread, thread),
            )
            status = self._state(customer, session).status_code
            if rows[0][0] or status != 404:
                v.add(f"{thread}: {rows[0][0]} rows left, GET state {status}")
                self._evidence(thread)

    def never_finished(self) -> None:
        v = self._new(
            "operation_never_finished",
            "a customer's request not done in its client's 240 s, or an operation still"
            " waiting 150 s after the faults stopped",
        )
        for what in self.records.unfinished:
            v.add(what)

    def agent_while_held(self) -> None:
        v = self._new(
            "agent_answered_while_held",
            "an agent run that answered (completed or interrupted) started while a person"
            " held the thread (between an accept and the release after it)",
        )
        for thread, run, at in self.pg.query(
            "SELECT r.thread_id, r.run_id, r.created_at FROM runs r"
            " JOIN control_history a ON a.thread_id = r.thread_id AND a.action = 'accept'"
            " WHERE r.status IN ('completed', 'interrupted') AND r.created_at >= a.at"
            " AND r.created_at < COALESCE((SELECT min(h.at) FROM control_history h"
            "  WHERE h.thread_id = a.thread_id AND h.id > a.id AND h.action = 'release'),"
            "  'infinity')"
        ):
            v.add(f"{thread}: run {run} at {at}")
            self._evidence(thread)
        self.info["threads a person accepted"] = len(self.records.held)

    def webhooks_lost(self) -> None:
        v = self._new(
            "webhook_not_delivered",
            "a webhook event (webhook_outbox) the receiver never got under its id, or one"
            " given up on",
        )
        if self.receiver is None:
            return
        got = self.receiver.ids()
        rows = self.pg.query(
            "SELECT event_id, thread_id, type, failed_at IS NOT NULL FROM webhook_outbox"
        )
        for event_id, thread, kind, failed in rows:
            if event_id not in got or failed:
                v.add(f"{thread}: {kind} {event_id} ({'given up' if failed else 'never got'})")
        resent = sum(n - 1 for n in self.receiver.received.values() if n > 1)
        self.info["webhook events"] = len(rows)
        self.info["webhook events delivered more than once (same id)"] = resent

    # --- external actions (actions.py) ---------------------------------------------------

    def _action_checks(self) -> list[Callable[[], None]]:
        if self.actions is None:
            return []
        applied = self.actions.applied()
        self._applied: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for entry in applied:
            self._applied.setdefault(_operation_of(entry), []).append(entry)
        self.info["external writes applied (the servers' journals)"] = len(applied)
        return [
            self.actions_applied_twice,
            self.actions_told_done_not_applied,
            self.actions_told_failed_but_applied,
            self.actions_unknown_not_queued,
            self.actions_declined_applied,
            self.actions_approved_lost,
        ]

    def _applied_for(self, action: Action) -> list[dict[str, Any]]:
        return self._applied.get(_operation_of({"tool": action.tool, **action.arguments}), [])

    def _ledger(self, thread: str) -> list[tuple[str, str, bool, str, int]]:
        """The remote writes' ledger rows of a thread: (key, state, ok, outcome, attempts)."""
        return [
            (str(k), str(state), bool(ok), str(outcome), int(n))
            for k, state, ok, outcome, n in self.pg.query(
                "SELECT idempotency_key, state, ok, outcome, attempts FROM tool_executions"
                " WHERE thread_id = %s AND tool_name = ANY(%s) ORDER BY created_at",
                (thread, list(IDEMPOTENT)),
            )
        ]

    def _action_evidence(self, action: Action) -> None:
        self._evidence(action.thread)
        lines = self.evidence[action.thread]
        if any(line.startswith("external write") for line in lines):
            return
        lines.append(f"external write {action.tool} {action.arguments}: told {action.told!r}")
        lines += [f"  ledger {row}" for row in self._ledger(action.thread)]
        lines += [f"  applied {entry}" for entry in self._applied_for(action)]

    def actions_applied_twice(self) -> None:
        v = self._new(
            "external_write_applied_twice",
            "an external write applied more than once for one operation (an idempotent one"
            " under two keys, a non-idempotent one sent again) or under one key",
        )
        for operation, entries in self._applied.items():
            keys = Counter(str(e.get("key")) for e in entries)
            if len(entries) > 1:
                v.add(f"{operation}: applied {len(entries)} times, keys {dict(keys)}")
        for action in self.records.actions:
            if len(self._applied_for(action)) > 1:
                self._action_evidence(action)
        asked = {_operation_of({"tool": a.tool, **a.arguments}) for a in self.records.actions}
        self.info["external writes applied that no customer asked for"] = sum(
            len(e) for op, e in self._applied.items() if op not in asked
        )

    def actions_told_done_not_applied(self) -> None:
        v = self._new(
            "external_write_told_done_not_once",
            "an external write the customer was told was done that the server did not apply"
            " exactly once",
        )
        for action in self.records.actions:
            if action.told == "done":
                n = len(self._applied_for(action))
                self.info["external writes told done"] += 1
                if n != 1:
                    v.add(
                        f"{action.thread}: {action.tool} {action.arguments}: told done, applied {n}"
                    )
                    self._action_evidence(action)

    def actions_told_failed_but_applied(self) -> None:
        v = self._new(
            "external_write_told_failed_but_ran",
            "an external write the customer was told had failed (not that its outcome is"
            " unknown) that the server applied",
        )
        for action in self.records.actions:
            if action.told == "failed":
                self.info["external writes told failed"] += 1
                if self._applied_for(action):
                    v.add(f"{action.thread}: {action.tool} {action.arguments} told failed, ran")
                    self._action_evidence(action)

    def actions_unknown_not_queued(self) -> None:
        v = self._new(
            "external_unknown_not_queued",
            "an external write whose outcome is unknown (or still 'sent' once settled) that is"
            " not queued for a person with a ticket naming its key, or was told done",
        )
        told = {a.thread: a for a in self.records.actions}
        for key, thread, tool, state in self.pg.query(
            "SELECT idempotency_key, thread_id, tool_name, state FROM tool_executions"
            " WHERE state IN ('unknown', 'sent') AND tool_name = ANY(%s)",
            (list(IDEMPOTENT),),
        ):
            action = told.get(thread)
            if state == "sent":
                # A call recorded as sent whose request never left (the record's COMMIT
                # answer was lost: the tool failed, "nothing was sent" is true) is only
                # counted; one the server applied was told failed, counted above.
                self.info[f"external writes left 'sent', never settled ({tool})"] += 1
                continue
            else:
                self.info[f"external writes with an unknown outcome ({tool})"] += 1
                tickets = self.pg.query(
                    "SELECT count(*) FROM handoff_tickets WHERE thread_id = %s AND summary LIKE %s",
                    (thread, f"%{key}%"),
                )
                control = self.pg.query(
                    "SELECT control, control_reason FROM thread_leases WHERE thread_id = %s",
                    (thread,),
                )
                queued = bool(control) and control[0][1] == "write_outcome_unknown"
                if not tickets[0][0] or not queued:
                    v.add(f"{thread}: {tool} {key} unknown; ticket {tickets[0][0]}, {control}")
                elif action is not None and action.told == "done":
                    v.add(f"{thread}: {tool} {key} unknown, and the customer was told done")
                else:
                    continue
            if action is not None:
                self._action_evidence(action)
            else:
                self._evidence(thread)
        for action in self.records.actions:
            if action.told == "unknown":
                self.info["external writes told a colleague will confirm"] += 1
                states = [row[1] for row in self._ledger(action.thread)]
                if "unknown" not in states:
                    v.add(f"{action.thread}: told a colleague will check; ledger {states}")
                    self._action_evidence(action)

    def actions_declined_applied(self) -> None:
        v = self._new("external_write_declined_ran", "a declined external write that was applied")
        for action in self.records.actions:
            if action.decision == "reject" and self._applied_for(action):
                v.add(f"{action.thread}: {action.tool} {action.arguments} declined, applied")
                self._action_evidence(action)

    def actions_approved_lost(self) -> None:
        v = self._new(
            "external_write_approved_lost",
            "an approved external write that was not applied, is not pending, not queued as"
            " unknown, and whose failure the customer was not shown",
        )
        for action in self.records.actions:
            if action.decision != "approve" or self._applied_for(action):
                continue
            if any(row[1] == "unknown" for row in self._ledger(action.thread)):
                continue  # a person checks it (counted above)
            state = self._state(action.customer, action.session)
            if state.status_code == 200 and state.json().get("pending"):
                self.info["external writes approved, still pending"] += 1
                continue
            if state.status_code == 200 and _failure_shown(state.json(), action.tool):
                self.info["external writes not applied, the failure shown"] += 1
                continue
            v.add(f"{action.thread}: {action.tool} {action.arguments} approved; not applied")
            self._action_evidence(action)


def _operation_of(entry: dict[str, Any]) -> tuple[str, str]:
    """(tool, the number unique to the operation) of an applied write or of a request."""
    tool = str(entry.get("tool"))
    if tool == "createRefundRequest":
        return tool, str(entry.get("invoice_id"))
    return tool, str(entry.get("points", entry.get("amount")))


def _failure_shown(state: dict[str, Any], tool: str) -> bool:
    """The transcript holds a result of `tool` that is an error."""
    return any(
        m["role"] == "tool"
        and m.get("name") == tool
        and (m.get("status") == "error" or str(m["content"]).startswith("Error:"))
        for m in state["messages"]
    )


def id_problem(run: RunSeen) -> str:
    """What is wrong with what a client got of one run over all its streams, or ''.

    Ids must only grow, and each stream must start after its Last-Event-ID. They may skip:
    adjacent tokens queued together go out as one event with the last one's id (README
    "HTTP API"). So a gap shows in the text: a completed answer the model's is known of
    must have come whole, each piece once.
    """
    last = 0
    for stream in run.streams:
        for seq in stream.ids:
            if seq <= max(last, stream.after):
                return f"id {seq} after {max(last, stream.after)} (stream from {stream.after})"
            last = seq
    text = "".join(run.tokens)
    completed = run.done is not None and run.done.get("status") == "completed"
    if completed and run.expected is not None and text not in ("", run.expected):
        return f"the answer came as {text!r} over {len(run.streams)} streams"
    return ""


def summary(results: list[Invariant]) -> dict[str, Any]:
    return {r.name: r.count for r in results}
