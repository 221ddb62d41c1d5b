"""The tau-bench folder: `users.json`, `products.json` and `orders.json`."""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

from psycopg_pool import AsyncConnectionPool

from app.db.transfer.data import FILES, Connectable, ImportSummary, InvalidData, Json, TauData
from app.db.transfer.export import export_data
from app.db.transfer.load import import_data
from app.db.transfer.validate import top_object
from app.domain.models import money


def read_dir(path: str | os.PathLike[str]) -> TauData:
    """Read the three files; numbers become `Decimal` so money keeps its cents exactly."""
    folder = Path(path)
    loaded: dict[str, dict[str, Json]] = {}
    for name in FILES:
        file = folder / f"{name}.json"
        try:
            value = json.loads(file.read_text(encoding="utf-8"), parse_float=Decimal)
        except FileNotFoundError:
            raise InvalidData(f"{file}: file not found") from None
        except UnicodeDecodeError:
            raise InvalidData(f"{file}: not UTF-8 text") from None
        except json.JSONDecodeError as e:
            raise InvalidData(
                f"{file}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})"
            ) from None
        loaded[name] = cast(dict[str, Json], top_object(value, name))
    return TauData(users=loaded["users"], products=loaded["products"], orders=loaded["orders"])


def write_dir(data: TauData, path: str | os.PathLike[str]) -> None:
    """Write the three files (each replaced atomically). Money is written as a JSON number."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in (
        ("users", data.users),
        ("products", data.products),
        ("orders", data.orders),
    ):
        target = folder / f"{name}.json"
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(dumps(value) + "\n", encoding="utf-8")
        tmp.replace(target)


def dumps(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=_number)


def _number(value: object) -> float:
    # tau-bench writes every amount as a float (247.0); a float holds any cent amount exactly
    # enough to print it back as written.
    if isinstance(value, Decimal):
        return float(money(value))
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


async def import_dir(
    pool: Connectable, path: str | os.PathLike[str], *, replace: bool = False
) -> ImportSummary:
    return await import_data(pool, read_dir(path), replace=replace)


async def export_dir(pool: AsyncConnectionPool[Any], path: str | os.PathLike[str]) -> TauData:
    data = await export_data(pool)
    write_dir(data, path)
    return data
