"""The shop's data as a comparable value, a readable diff of two, and putting rows back.

tau-bench compares a hash of its whole data. Here each row of the same tables is hashed by
Postgres, so comparing costs a few thousand short strings, and a failed task can still say
which row differs and how: full rows are read only where they differ from the fresh data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

# Each shop table with the columns that name a row. `updated_at` is bookkeeping, not data.
TABLE_KEYS: dict[str, tuple[str, ...]] = {
    "customers": ("id",),
    "payment_methods": ("id",),
    "products": ("id",),
    "variants": ("item_id",),
    "orders": ("id",),
    "order_items": ("order_id", "position"),
    "fulfillments": ("order_id", "position"),
    "payment_transactions": ("order_id", "position"),
}
IGNORED_COLUMNS = ("updated_at", "created_at")

Row = dict[str, Any]


@dataclass
class Snapshot:
    """Every row's hash by table and key. `rows` holds the full rows: all of them for the
    fresh data, and for any other snapshot only those that differ from the fresh data."""

    hashes: dict[str, dict[str, str]] = field(default_factory=dict)
    rows: dict[str, dict[str, Row]] = field(default_factory=dict)


def _row_sql(table: str) -> sql.Composed:
    dropped = sql.SQL(" - ").join(map(sql.Literal, IGNORED_COLUMNS))
    key = sql.SQL(", ").join(
        sql.SQL("{}::text").format(sql.Identifier(c)) for c in TABLE_KEYS[table]
    )
    return sql.SQL("SELECT concat_ws('/', {}) AS k, to_jsonb(t) - {} AS row FROM {} t").format(
        key, dropped, sql.Identifier(table)
    )


async def read_snapshot(conn: AsyncConnection[Any], fresh: Snapshot | None = None) -> Snapshot:
    """The shop as the connection sees it (in its current transaction, if any). Without
    `fresh`, this is the fresh data: every full row is kept."""
    snapshot = Snapshot()
    async with conn.cursor(row_factory=dict_row) as cur:
        for table in TABLE_KEYS:
            rows = _row_sql(table)
            await cur.execute(sql.SQL("SELECT k, md5(row::text) AS h FROM ({}) s").format(rows))
            hashes = {r["k"]: r["h"] for r in await cur.fetchall()}
            snapshot.hashes[table] = hashes
            if fresh is None:
                await cur.execute(rows)
                snapshot.rows[table] = {r["k"]: r["row"] for r in await cur.fetchall()}
                continue
            known = fresh.hashes.get(table, {})
            differ = [k for k, h in hashes.items() if known.get(k) != h]
            snapshot.rows[table] = {}
            if differ:
                await cur.execute(
                    sql.SQL("SELECT k, row FROM ({}) s WHERE k = ANY(%s)").format(rows), (differ,)
                )
                snapshot.rows[table] = {r["k"]: r["row"] for r in await cur.fetchall()}
    return snapshot


@dataclass(frozen=True)
class RowDiff:
    table: str
    key: str
    kind: str  # "changed", "unexpected" (a row the expected data lacks), "missing"
    columns: dict[str, tuple[Any, Any]]  # column -> (got, expected), for "changed"

    def describe(self) -> str:
        where = f"{self.table}[{self.key}]"
        if self.kind == "unexpected":
            return f"{where}: a row the expected data does not have"
        if self.kind == "missing":
            return f"{where}: missing (the expected data has it)"
        parts = [f"{c}: {got!r}, expected {want!r}" for c, (got, want) in self.columns.items()]
        return f"{where}: " + "; ".join(parts)


def diff(got: Snapshot, expected: Snapshot, fresh: Snapshot) -> list[RowDiff]:
    """Rows that differ, table by table in TABLE_KEYS order, keys sorted. Both snapshots
    were read against `fresh`, which holds every row neither of them kept."""
    out: list[RowDiff] = []
    for table in TABLE_KEYS:
        mine, theirs = got.hashes.get(table, {}), expected.hashes.get(table, {})
        if mine == theirs:
            continue
        for key in sorted(set(mine) | set(theirs)):
            if mine.get(key) == theirs.get(key):
                continue
            if key not in theirs:
                out.append(RowDiff(table, key, "unexpected", {}))
            elif key not in mine:
                out.append(RowDiff(table, key, "missing", {}))
            else:
                a, b = _row(got, fresh, table, key), _row(expected, fresh, table, key)
                cols = {c: (a.get(c), b.get(c)) for c in sorted(set(a) | set(b))}
                changed = {c: v for c, v in cols.items() if v[0] != v[1]}
                out.append(RowDiff(table, key, "changed", changed))
    return out


def _row(snapshot: Snapshot, fresh: Snapshot, table: str, key: str) -> Row:
    kept = snapshot.rows.get(table, {}).get(key)
    return kept if kept is not None else fresh.rows[table][key]


async def restore(conn: AsyncConnection[Any], rows: list[RowDiff], fresh: Snapshot) -> None:
    """Put the rows that differ back as they are in `fresh`, in one transaction: rows fresh
    does not have are deleted (children first), the others are written back from their JSON
    (parents first). Columns a snapshot leaves out (`updated_at`) keep or take their default."""
    order = list(TABLE_KEYS)
    async with conn.transaction():
        for d in sorted(rows, key=lambda d: -order.index(d.table)):
            if d.kind == "unexpected":
                where, params = _where(d)
                await conn.execute(
                    sql.SQL("DELETE FROM {} WHERE {}").format(sql.Identifier(d.table), where),
                    params,
                )
        for d in sorted(rows, key=lambda d: order.index(d.table)):
            if d.kind == "unexpected":
                continue
            row = fresh.rows[d.table][d.key]
            table = sql.Identifier(d.table)
            cols = sql.SQL(", ").join(map(sql.Identifier, row))
            source = sql.SQL("SELECT {} FROM jsonb_populate_record(NULL::{}, %s)").format(
                cols, table
            )
            if d.kind == "missing":
                await conn.execute(
                    sql.SQL("INSERT INTO {} ({}) {}").format(table, cols, source), (Jsonb(row),)
                )
            else:
                where, params = _where(d)
                await conn.execute(
                    sql.SQL("UPDATE {} SET ({}) = ({}) WHERE {}").format(
                        table, cols, source, where
                    ),
                    (Jsonb(row), *params),
                )


def _where(d: RowDiff) -> tuple[sql.Composed, tuple[str, ...]]:
    columns = TABLE_KEYS[d.table]
    values = tuple(d.key.split("/", len(columns) - 1))
    where = sql.SQL(" AND ").join(
        sql.SQL("{}::text = %s").format(sql.Identifier(c)) for c in columns
    )
    return where, values
