from __future__ import annotations

import copy
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from app.cli import main
from app.db.transfer import (
    DataNotEmpty,
    InvalidData,
    TauData,
    export_data,
    export_dir,
    import_data,
    import_dir,
    read_dir,
)

TAU_SMALL = Path(__file__).resolve().parents[1] / "fixtures" / "tau_small"


def cents(value: Any) -> Any:
    """The JSON value with every number as a Decimal to the cent, for comparing to the cent."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float | Decimal):
        return Decimal(str(value)).quantize(Decimal("0.01"))
    if isinstance(value, dict):
        return {k: cents(v) for k, v in value.items()}
    if isinstance(value, list):
        return [cents(v) for v in value]
    return value


def as_json(data: TauData) -> dict[str, Any]:
    return cents({"users": data.users, "products": data.products, "orders": data.orders})


def write_files(folder: Path, data: TauData) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("users", "products", "orders"):
        (folder / f"{name}.json").write_text(json.dumps(getattr(data, name), default=float))
    return folder


async def shop_counts(pool: AsyncConnectionPool[Any]) -> dict[str, int]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM customers) AS customers,"
            " (SELECT count(*) FROM products) AS products,"
            " (SELECT count(*) FROM orders) AS orders"
        )
        row = await cur.fetchone()
    assert row is not None
    return dict(row)


class TestRoundTrip:
    async def test_export_after_import_gives_back_the_same_json(
        self, db: AsyncConnectionPool[Any], tmp_path: Path
    ) -> None:
        await import_dir(db, TAU_SMALL)
        await export_dir(db, tmp_path)
        assert as_json(read_dir(tmp_path)) == as_json(read_dir(TAU_SMALL))

    async def test_fixture_covers_every_status_and_payment_source(self) -> None:
        data = read_dir(TAU_SMALL)
        statuses = {o["status"] for o in data.orders.values()}
        assert statuses == {
            "pending",
            "processed",
            "delivered",
            "cancelled",
            "pending (item modified)",
            "return requested",
            "exchange requested",
        }
        sources = {m["source"] for u in data.users.values() for m in u["payment_methods"].values()}
        assert sources == {"credit_card", "gift_card", "paypal"}

    async def test_user_order_list_keeps_its_order(self, db: AsyncConnectionPool[Any]) -> None:
        data = read_dir(TAU_SMALL)
        data.users["noah_brown_6181"]["orders"].reverse()
        await import_data(db, data)
        exported = await export_data(db)
        assert exported.users["noah_brown_6181"]["orders"] == ["#W2611340", "#W7678072"]

    async def test_money_is_stored_to_the_cent(self, db: AsyncConnectionPool[Any]) -> None:
        await import_dir(db, TAU_SMALL)
        async with db.connection() as conn:
            cur = await conn.execute(
                "SELECT amount FROM payment_transactions WHERE order_id = '#W7387996'"
            )
            row = await cur.fetchone()
        assert row == {"amount": Decimal("54.45")}

    async def test_exported_money_is_a_json_number(
        self, db: AsyncConnectionPool[Any], tmp_path: Path
    ) -> None:
        await import_dir(db, TAU_SMALL)
        await export_dir(db, tmp_path)
        orders = json.loads((tmp_path / "orders.json").read_text())
        assert orders["#W7387996"]["payment_history"][0]["amount"] == 54.45
        users = json.loads((tmp_path / "users.json").read_text())
        assert users["mia_garcia_4516"]["payment_methods"]["gift_card_3036624"]["balance"] == 122.5

    async def test_import_works_on_a_connection_the_caller_holds(
        self, db: AsyncConnectionPool[Any]
    ) -> None:
        async with db.connection() as conn:
            summary = await import_data(conn, read_dir(TAU_SMALL))
        assert (summary.customers, summary.products, summary.variants, summary.orders) == (
            4,
            3,
            11,
            7,
        )
        assert await shop_counts(db) == {"customers": 4, "products": 3, "orders": 7}


class TestImportIntoExistingData:
    async def test_non_empty_database_is_refused_without_replace(
        self, db: AsyncConnectionPool[Any]
    ) -> None:
        await import_dir(db, TAU_SMALL)
        with pytest.raises(DataNotEmpty, match="already holds shop data"):
            await import_dir(db, TAU_SMALL)
        assert await shop_counts(db) == {"customers": 4, "products": 3, "orders": 7}

    async def test_refusal_holds_on_a_connection_with_plain_rows(
        self, db: AsyncConnectionPool[Any], database_url: str
    ) -> None:
        await import_dir(db, TAU_SMALL)
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            with pytest.raises(DataNotEmpty):
                await import_data(conn, read_dir(TAU_SMALL))

    async def test_products_alone_make_the_database_non_empty(
        self, db: AsyncConnectionPool[Any]
    ) -> None:
        async with db.connection() as conn:
            await conn.execute("INSERT INTO products (id, name) VALUES ('1234567890', 'Lamp')")
        with pytest.raises(DataNotEmpty):
            await import_dir(db, TAU_SMALL)

    async def test_replace_empties_the_shop_first(self, db: AsyncConnectionPool[Any]) -> None:
        await import_dir(db, TAU_SMALL)
        smaller = read_dir(TAU_SMALL)
        smaller.users = {"yusuf_rossi_9620": smaller.users["yusuf_rossi_9620"]}
        smaller.orders = {"#W4776164": smaller.orders["#W4776164"]}
        await import_data(db, smaller, replace=True)
        assert as_json(await export_data(db)) == as_json(smaller)

    async def test_failed_replace_keeps_the_old_data(self, db: AsyncConnectionPool[Any]) -> None:
        await import_dir(db, TAU_SMALL)
        before = await export_data(db)
        broken = read_dir(TAU_SMALL)
        # Postgres refuses NUL in text: the failure comes from the database, mid-load.
        broken.orders["#W9373487"]["items"][0]["name"] = "T-\x00Shirt"
        with pytest.raises(psycopg.Error, match="0x00"):
            await import_data(db, broken, replace=True)
        assert as_json(await export_data(db)) == as_json(before)


class TestBadInput:
    def mutated(self, change: Any) -> TauData:
        data = read_dir(TAU_SMALL)
        change(data)
        return data

    async def refused(self, db: AsyncConnectionPool[Any], data: TauData) -> str:
        with pytest.raises(InvalidData) as err:
            await import_data(db, data)
        assert await shop_counts(db) == {"customers": 0, "products": 0, "orders": 0}
        return err.value.message

    async def test_missing_file_names_it(
        self, db: AsyncConnectionPool[Any], tmp_path: Path
    ) -> None:
        (tmp_path / "users.json").write_text("{}")
        with pytest.raises(InvalidData, match=r"products\.json: file not found"):
            await import_dir(db, tmp_path)

    async def test_invalid_json_names_the_file_and_line(
        self, db: AsyncConnectionPool[Any], tmp_path: Path
    ) -> None:
        folder = write_files(tmp_path, read_dir(TAU_SMALL))
        (folder / "orders.json").write_text('{\n  "#W1": {"order_id": \n}')
        with pytest.raises(InvalidData, match=r"orders\.json: not valid JSON .* line 3"):
            await import_dir(db, folder)

    async def test_top_level_must_be_an_object(
        self, db: AsyncConnectionPool[Any], tmp_path: Path
    ) -> None:
        folder = write_files(tmp_path, read_dir(TAU_SMALL))
        (folder / "products.json").write_text("[]")
        with pytest.raises(InvalidData, match=r"products\.json: expected an object keyed by id"):
            await import_dir(db, folder)

    async def test_bad_price_names_the_order_and_item(self, db: AsyncConnectionPool[Any]) -> None:
        def change(d: TauData) -> None:
            d.orders["#W7387996"]["items"][1]["price"] = "27.95"

        message = await self.refused(db, self.mutated(change))
        assert message == (
            "orders.json › '#W7387996' › items[1]: field 'price' must be a number, got a string"
        )

    async def test_missing_field_is_named(self, db: AsyncConnectionPool[Any]) -> None:
        message = await self.refused(
            db, self.mutated(lambda d: d.users["mia_garcia_4516"].pop("email"))
        )
        assert message == "users.json › 'mia_garcia_4516': missing field 'email'"

    async def test_unknown_field_is_named(self, db: AsyncConnectionPool[Any]) -> None:
        def change(d: TauData) -> None:
            d.products["8310926033"]["colour"] = "blue"

        message = await self.refused(db, self.mutated(change))
        assert message == "products.json › '8310926033': unknown field 'colour'"

    async def test_unknown_status_is_refused(self, db: AsyncConnectionPool[Any]) -> None:
        def change(d: TauData) -> None:
            d.orders["#W2611340"]["status"] = "shipped"

        message = await self.refused(db, self.mutated(change))
        assert message.startswith("orders.json › '#W2611340': status must be one of pending,")

    async def test_order_for_a_missing_user_is_refused(self, db: AsyncConnectionPool[Any]) -> None:
        def change(d: TauData) -> None:
            del d.users["yusuf_rossi_9620"]

        message = await self.refused(db, self.mutated(change))
        assert message == "orders.json › '#W4776164': user 'yusuf_rossi_9620' is not in users.json"

    async def test_listed_order_missing_from_orders_is_refused(
        self, db: AsyncConnectionPool[Any]
    ) -> None:
        def change(d: TauData) -> None:
            d.users["noah_brown_6181"]["orders"].append("#W0000000")

        message = await self.refused(db, self.mutated(change))
        assert "'#W0000000' is not in orders.json" in message

    async def test_gift_card_without_balance_is_refused(self, db: AsyncConnectionPool[Any]) -> None:
        def change(d: TauData) -> None:
            del d.users["olivia_lopez_3865"]["payment_methods"]["gift_card_7711863"]["balance"]

        message = await self.refused(db, self.mutated(change))
        assert message == (
            "users.json › 'olivia_lopez_3865' › payment_methods › 'gift_card_7711863': "
            "a gift card needs a balance"
        )

    async def test_key_and_id_must_agree(self, db: AsyncConnectionPool[Any]) -> None:
        def change(d: TauData) -> None:
            d.orders["#W2611340"]["order_id"] = "#W2611341"

        message = await self.refused(db, self.mutated(change))
        assert "order_id '#W2611341' does not match its key '#W2611340'" in message

    async def test_shared_payment_method_id_is_refused(self, db: AsyncConnectionPool[Any]) -> None:
        def change(d: TauData) -> None:
            method = copy.deepcopy(d.users["noah_brown_6181"]["payment_methods"]["paypal_5727330"])
            d.users["yusuf_rossi_9620"]["payment_methods"]["paypal_5727330"] = method

        message = await self.refused(db, self.mutated(change))
        assert "'paypal_5727330' appears under both" in message

    def test_cli_reports_a_bad_file_in_one_line(
        self,
        database_url: str,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        monkeypatch.setenv("DATABASE_URL", database_url)
        folder = write_files(tmp_path, read_dir(TAU_SMALL))
        (folder / "users.json").write_text('{"x": []}')
        with pytest.raises(SystemExit) as exit_:
            main(["data", "import", str(folder)])
        assert exit_.value.code == 2
        assert capsys.readouterr().err == (
            "error: users.json › 'x': expected an object, got a list\n"
        )
