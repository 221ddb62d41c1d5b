"""The two statements of a run: the one that opens it (`cs_begin_run`,
app/migrations/versions/0010) and the one that records its outcome and releases its lease.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from app.fencing import Lease
from app.jsonbytes import json_bytes

# The newest checkpoint of a thread's root graph: ids only, the checkpoint itself is not read.
LATEST_CHECKPOINT = """SELECT checkpoint_id FROM checkpoints
    WHERE thread_id = %(thread_id)s AND checkpoint_ns = ''
    ORDER BY checkpoint_id DESC LIMIT 1"""


# app/migrations/versions/0010: the rate limit and budget, the claim, the run's record and
# the checkpoint it starts from.
BEGIN_RUN = """SELECT * FROM cs_begin_run(%(thread_id)s, %(user_id)s, %(session_id)s,
    %(owner)s, %(run_id)s, %(ttl_ms)s, %(client_message_id)s, %(rate_key)s,
    %(interval_s)s::float8, %(window_s)s::float8, %(budget)s::bigint)"""

_CLOSE_RECORD = f"""WITH latest AS ({LATEST_CHECKPOINT}),
    -- the first close of the run: only it counts the run's messages and tokens
    prev AS (SELECT coalesce((SELECT result IS NULL FROM runs WHERE run_id = %(run_id)s),
                             false) AS fresh),
    thread AS (
        UPDATE threads SET updated_at = now(),
               message_count = message_count
                   + CASE WHEN (SELECT fresh FROM prev) THEN %(added)s ELSE 0 END,
               title = CASE WHEN title = '' THEN coalesce(%(title)s, '') ELSE title END
        WHERE thread_id = %(thread_id)s
    ), run AS (
        UPDATE runs SET status = %(status)s, finished_at = now(), ttft_ms = %(ttft_ms)s,
               result = jsonb_set(%(result)s, '{{checkpoint_id}}',
                   coalesce(to_jsonb((SELECT checkpoint_id FROM latest)), 'null'::jsonb)),
               cancel_requested = false, tail_requested = false
        -- A run's outcome is recorded once. A second close (a retry of one that committed
        -- though its client saw an error, or the fallback after such a cut) changes nothing.
        WHERE run_id = %(run_id)s AND result IS NULL
    ), log AS (
        INSERT INTO run_event_chunks (run_id, first_seq, last_seq, events)
        SELECT %(run_id)s, %(first_seq)s::int, %(last_seq)s::int, %(events)s::jsonb
        WHERE %(events)s::jsonb IS NOT NULL
        ON CONFLICT (run_id, first_seq) DO UPDATE
            SET last_seq = EXCLUDED.last_seq, events = EXCLUDED.events
            WHERE run_event_chunks.last_seq < EXCLUDED.last_seq
    ), usage AS (
        INSERT INTO token_usage AS u (user_id, day, tokens)
        SELECT %(user_id)s::text, (now() AT TIME ZONE 'UTC')::date, %(tokens)s::bigint
        WHERE %(user_id)s::text IS NOT NULL AND %(tokens)s::bigint > 0
          AND (SELECT fresh FROM prev)
        ON CONFLICT (user_id, day) DO UPDATE SET tokens = u.tokens + EXCLUDED.tokens
    ),"""

# The release when the run handed nothing over: the lease freed if it is still this run's.
_RELEASE = """ released AS (
        UPDATE thread_leases SET run_id = NULL, expires_at = clock_timestamp()
        WHERE thread_id = %(thread_id)s AND generation = %(generation)s::bigint
          AND run_id = %(lease_run)s::text
"""

# The release of a run that handed the thread over to a person.
_RELEASE_HANDOFF = """ before AS (SELECT control FROM thread_leases WHERE thread_id = %(thread_id)s
    ), released AS (
        -- the release, and a handoff the run made: the thread then waits for a person
        -- (migration 0011; one UPDATE, as a row is changed once per statement). A handoff
        -- queues the thread even when the lease is no longer this run's (its outcome was
        -- recorded after an outage, past the lease): the customer asked for a person.
        UPDATE thread_leases SET
            run_id = CASE WHEN generation = %(generation)s::bigint
                          AND run_id = %(lease_run)s::text THEN NULL ELSE run_id END,
            expires_at = CASE WHEN generation = %(generation)s::bigint
                              AND run_id = %(lease_run)s::text
                         THEN clock_timestamp() ELSE expires_at END,
            control = CASE WHEN q.queue THEN 'queued' ELSE control END,
            control_version = control_version + CASE WHEN q.queue THEN 1 ELSE 0 END,
            control_summary = CASE WHEN q.queue THEN (
                SELECT t.summary FROM handoff_tickets t WHERE t.thread_id = %(thread_id)s
                ORDER BY t.id DESC LIMIT 1) ELSE control_summary END,
            control_reason = CASE WHEN q.queue THEN %(reason)s::text ELSE control_reason END,
            control_since = CASE WHEN q.queue THEN now() ELSE control_since END
        FROM (SELECT %(handoff)s::bool AND coalesce((SELECT control FROM before), 'agent')
                     = 'agent' AS queue) q
        WHERE thread_id = %(thread_id)s
          AND (q.queue OR (generation = %(generation)s::bigint
                           AND run_id = %(lease_run)s::text))
        RETURNING q.queue, control_version, control_summary
    ), handoff AS (SELECT * FROM released WHERE queue
    ), handoff_history AS (
        INSERT INTO control_history (thread_id, version, action, actor, control)
        SELECT %(thread_id)s, h.control_version, 'handoff', 'agent', 'queued' FROM handoff h
    ), handoff_event AS (
        INSERT INTO thread_events (thread_id, kind, data)
        SELECT %(thread_id)s, 'control', jsonb_build_object(
            'thread_id', %(thread_id)s, 'state', 'queued', 'version', h.control_version,
            'summary', h.control_summary, 'reason', %(reason)s::text)
        FROM handoff h
"""

_CLOSE_END = """    ), tailed AS (
        -- a reader on another replica follows the run (app/runs/logs.py): wake it for
        -- `done` (the snapshot is the one before `run` clears the request)
        SELECT pg_notify('cs_run_events', '') FROM runs
        WHERE run_id = %(run_id)s AND tail_requested AND result IS NULL
    )
    SELECT (SELECT checkpoint_id FROM latest) AS checkpoint_id,
           (SELECT count(*) FROM tailed) AS tail_woken"""

# app/runs/repository.py: the statement that records a run's outcome and releases its
# lease. The handoff's parts (the queue, its history and event) are planned and started
# only for a run that handed over: in every other close they did nothing, and setting them
# up cost 0.1 ms of Postgres CPU a turn (a sixth of the statement).
CLOSE_RUN = _CLOSE_RECORD + _RELEASE + _CLOSE_END
CLOSE_RUN_HANDOFF = _CLOSE_RECORD + _RELEASE_HANDOFF + _CLOSE_END


def close_params(
    run_id: str,
    thread_id: str,
    status: str,
    result: dict[str, Any],
    title: str | None,
    added: int,
    events: list[Any] | None,
    lease: Lease | None,
    user_id: str | None,
    handoff: dict[str, Any] | None,
) -> dict[str, Any]:
    """`CLOSE_RUN`'s parameters but `ttft_ms` (see `RunRepository.close_run`)."""
    usage = result.get("usage") or {}
    tokens = int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
    return {
        "thread_id": thread_id,
        "run_id": run_id,
        "status": status,
        "result": Jsonb(result),
        "title": title,
        "added": added,
        "events": Jsonb(events, dumps=log_json) if events else None,
        "first_seq": events[0][0] if events else None,
        "last_seq": events[-1][0] if events else None,
        "user_id": user_id,
        "tokens": tokens,
        "generation": lease.generation if lease is not None else None,
        "lease_run": lease.run_id if lease is not None else None,
        "handoff": handoff is not None,
        "reason": (handoff or {}).get("reason"),
    }


def log_json(value: Any) -> bytes | str:
    """A run log's JSON (orjson, the standard library for what it refuses)."""
    return json_bytes(value) or json.dumps(value, default=str)


# Runs whose process died on a thread nobody claims again (migration 0021): a lease expired
# for longer than `grace_s` names no run any more (the run goes to `dead_run`, for the
# thread's next claim to finish what it left), and the run is abandoned. A lease a process
# is renewing at this moment is skipped, not waited for.
ABANDON_DEAD = """WITH dead_runs AS (
        -- from the running runs (runs_running, a few rows): no index on the leases' expiry,
        -- so a claim, renewal or release updates a lease in place (migration 0028)
        SELECT l.thread_id, l.run_id FROM runs r
        JOIN thread_leases l ON l.thread_id = r.thread_id AND l.run_id = r.run_id
        WHERE r.status = 'running'
          AND l.expires_at < clock_timestamp() - make_interval(secs => %(grace_s)s)
        FOR UPDATE OF l SKIP LOCKED
    ), dead_claims AS (
        -- and from the claims that are not a run's (a staff message, a rewind; 0029)
        SELECT l.thread_id, l.run_id FROM held_claims h
        JOIN thread_leases l ON l.thread_id = h.thread_id AND l.run_id = h.run_id
        WHERE l.expires_at < clock_timestamp() - make_interval(secs => %(grace_s)s)
        FOR UPDATE OF l SKIP LOCKED
    ), forgotten AS (
        -- a note whose lease has moved on (released, taken over) or is freed now
        DELETE FROM held_claims h
        WHERE NOT EXISTS (SELECT 1 FROM thread_leases l
                          WHERE l.thread_id = h.thread_id AND l.run_id = h.run_id)
           OR (h.thread_id, h.run_id) IN (SELECT thread_id, run_id FROM dead_claims)
    ), freed AS (
        UPDATE thread_leases l SET run_id = NULL, dead_run = dead.run_id
        FROM (SELECT * FROM dead_runs UNION ALL SELECT * FROM dead_claims) dead
        WHERE l.thread_id = dead.thread_id
        RETURNING dead.run_id
    )
    UPDATE runs r SET status = 'abandoned', finished_at = now()
    FROM freed WHERE r.run_id = freed.run_id AND r.status = 'running'"""

# A deleted thread's client_message_ids (migration 0022), in the delete's transaction: the
# opening statement refuses a late duplicate of one of them instead of starting over.
REMEMBER_DELETED = """INSERT INTO deleted_messages (thread_id, client_message_id)
    SELECT thread_id, client_message_id FROM runs
    WHERE thread_id = %s AND client_message_id IS NOT NULL
    ON CONFLICT (thread_id, client_message_id) DO UPDATE SET deleted_at = now()"""

# A run's stored log, in order, from its chunks.
# Each followed run after its reader's cursor, in one statement (run_event_chunks'
# primary key (run_id, first_seq) finds its chunks; `held` as `RunRepository.run` has it).
LOGS_AFTER = """SELECT f.thread_id, f.run_id, r.status,
        EXISTS (SELECT 1 FROM thread_leases l
                WHERE l.thread_id = r.thread_id AND l.run_id = r.run_id
                  AND l.expires_at > clock_timestamp()) AS held,
        (SELECT jsonb_agg(e.rec ORDER BY c.first_seq, e.i)
         FROM run_event_chunks c,
              jsonb_array_elements(c.events) WITH ORDINALITY AS e(rec, i)
         WHERE c.run_id = f.run_id AND c.last_seq > f.after) AS events
    FROM unnest(%s::text[], %s::text[], %s::int[]) AS f(thread_id, run_id, after)
    LEFT JOIN runs r ON r.thread_id = f.thread_id AND r.run_id = f.run_id"""

EVENTS = """(SELECT jsonb_agg(e.rec ORDER BY c.first_seq, e.i)
        FROM run_event_chunks c, jsonb_array_elements(c.events) WITH ORDINALITY AS e(rec, i)
        WHERE c.run_id = runs.run_id) AS events"""


@dataclass(frozen=True)
class Begun:
    """What `begin_run` found: `status` is started, duplicate (`earlier` is that run's
    record), busy, rate_limited, budget_exhausted or deleted (a message of a deleted
    thread); `checkpoint` is the row the run starts from, as the checkpointer's SELECT
    returns it (None: the thread has none yet)."""

    status: str  # or human: a person answers, the message is stored and no run starts
    generation: int | None
    stale_run: str | None
    wait_s: float
    earlier: dict[str, Any] | None
    checkpoint: dict[str, Any] | None
    control: str = "agent"  # who answers: agent, queued or human (migration 0011)
    policy_version: int | None = None  # the rules the run answers with (migration 0024)

    @property
    def checkpoint_id(self) -> str | None:
        return None if self.checkpoint is None else str(self.checkpoint["checkpoint_id"])


def begun(thread_id: str, row: dict[str, Any]) -> Begun:
    status = str(row["status"])
    wait = {"busy": "busy_for_s", "rate_limited": "ahead_s", "budget_exhausted": "day_left_s"}
    earlier = None
    if status == "duplicate":
        earlier = {
            "run_id": row["earlier_run"],
            "status": row["earlier_status"],
            "result": row["earlier_result"],
        }
    checkpoint = None
    if row["checkpoint_id"] is not None:
        checkpoint = {
            "thread_id": thread_id,
            "checkpoint_ns": "",
            **{k: row[k] for k in _CHECKPOINT_COLUMNS},
        }
    return Begun(
        status=status,
        generation=row["generation"],
        stale_run=row["stale_run"],
        wait_s=float(row[wait[status]] or 0.0) if status in wait else 0.0,
        earlier=earlier,
        checkpoint=checkpoint,
        control=str(row.get("control") or "agent"),
        policy_version=row.get("policy_version"),
    )


_CHECKPOINT_COLUMNS = (
    "checkpoint",
    "checkpoint_id",
    "parent_checkpoint_id",
    "metadata",
    "channel_values",
    "pending_writes",
)
