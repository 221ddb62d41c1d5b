"""The tables that hold a thread's conversation: one list for everything that deletes a
thread (DELETE /threads, retention's expiry, a customer's erase).

A table that gains a `thread_id` column is either added here or named, with its reason, in
the test that compares this list with the schema (tests/integration/test_thread_tables.py).
"""

from __future__ import annotations

from psycopg import sql

# LangGraph's checkpointer owns these; DELETE /threads has it delete them (`adelete_thread`),
# retention runs its statements; erase deletes them with the rest.
CHECKPOINT_TABLES: tuple[str, ...] = ("checkpoint_writes", "checkpoint_blobs", "checkpoints")

# In the order they are deleted. `run_event_chunks` has no thread_id: it goes with its runs,
# so before them. `threads` goes last: its AFTER DELETE triggers forget the thread's control,
# events, webhooks and channel records (app/db/sql/40_control.sql, 50_webhooks.sql,
# 80_channels.sql).
THREAD_TABLES: tuple[str, ...] = (
    *CHECKPOINT_TABLES,
    "transcript_archive",
    "policy_moves",  # which rules answered (issue 42)
    "run_event_chunks",
    "runs",
    "threads",
)
OUR_TABLES: tuple[str, ...] = tuple(t for t in THREAD_TABLES if t not in CHECKPOINT_TABLES)

# The tables keyed by a run rather than a thread, and the run's table.
_BY_RUN = {"run_event_chunks": "runs"}


def delete_statement(table: str, where: sql.Composable) -> sql.Composed:
    """DELETE the rows of `table` for the threads `where` selects (a condition on
    `thread_id`, e.g. sql.SQL("thread_id = ANY(%s)"))."""
    parent = _BY_RUN.get(table)
    if parent is None:
        return sql.SQL("DELETE FROM {} WHERE {}").format(sql.Identifier(table), where)
    return sql.SQL("DELETE FROM {} WHERE run_id IN (SELECT run_id FROM {} WHERE {})").format(
        sql.Identifier(table), sql.Identifier(parent), where
    )


def delete_statements(
    where: sql.Composable, tables: tuple[str, ...] = THREAD_TABLES
) -> list[tuple[str, sql.Composed]]:
    """(table, statement) for each of `tables`, in the order to run them."""
    return [(table, delete_statement(table, where)) for table in tables]
