"""Import and export the shop's data in the tau-bench retail layout.

A folder holds `users.json`, `products.json` and `orders.json`, each one JSON object keyed by id.
Import reads every record into the domain values first, so a bad record is refused with a
message naming it before anything is written; then it loads all rows with COPY in one
transaction. Export reads one snapshot and rebuilds the same three objects.

The package splits it by job: `data` (the objects and errors), `validate` (records into
domain values), `load` (COPY), `export` (a snapshot back to the objects), `files` (the folder).
"""

from app.db.transfer.data import (
    FILES,
    ORDER_OPTIONAL,
    SHOP_TABLES,
    DataNotEmpty,
    ImportSummary,
    InvalidData,
    Json,
    TauData,
    TransferError,
)
from app.db.transfer.export import export_data
from app.db.transfer.files import dumps, export_dir, import_dir, read_dir, write_dir
from app.db.transfer.load import import_data
from app.db.transfer.validate import Shop, parse, parse_order, parse_product, parse_user

__all__ = [
    "FILES",
    "ORDER_OPTIONAL",
    "SHOP_TABLES",
    "DataNotEmpty",
    "ImportSummary",
    "InvalidData",
    "Json",
    "Shop",
    "TauData",
    "TransferError",
    "dumps",
    "export_data",
    "export_dir",
    "import_data",
    "import_dir",
    "parse",
    "parse_order",
    "parse_product",
    "parse_user",
    "read_dir",
    "write_dir",
]
