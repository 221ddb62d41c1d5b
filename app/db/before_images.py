"""A write's before-image: the shop rows it locked to change, as they were when locked.

The write path (`execute_write`) collects while its action runs; the repository adds what
its locking reads return (`keep`), from the same statements (their rows as `to_jsonb`, no
extra query); the audit row stores it. Outside a write nothing is collected.

An image is keyed by group, `order:<id>` or `customer:<id>`, each a table name mapped to
the group's rows: all of them, so a row the write added is one its image lacks. The first
reading of a group in a write is the one kept (a later one may already see the change).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

Row = dict[str, Any]
Image = dict[str, dict[str, list[Row]]]  # group -> table -> rows

# Personal columns of the groups' tables: dropped when a customer's data is erased.
PERSONAL_COLUMNS = frozenset(
    {"first_name", "last_name", "email", "address1", "address2", "city", "state", "country", "zip"}
)

_collecting: ContextVar[Image | None] = ContextVar("before_images", default=None)


@contextmanager
def collecting() -> Iterator[Image]:
    image: Image = {}
    token = _collecting.set(image)
    try:
        yield image
    finally:
        _collecting.reset(token)


def active() -> bool:
    """Whether a write is collecting (the repository then reads its rows' images too)."""
    return _collecting.get() is not None


def keep(group: str, tables: Mapping[str, Sequence[Row]]) -> None:
    image = _collecting.get()
    if image is not None and group not in image:
        image[group] = {table: list(rows) for table, rows in tables.items()}


def redact(image: Image) -> Image:
    """The image without names, emails and addresses: ids, statuses and amounts stay."""
    return {
        group: {
            table: [{k: v for k, v in row.items() if k not in PERSONAL_COLUMNS} for row in rows]
            for table, rows in tables.items()
        }
        for group, tables in image.items()
    }
