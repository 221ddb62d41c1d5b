"""`python -m app.tools.labels`: write the page's tool labels (app/static/tool-labels.js)
from the tool specs. A unit test fails while the file is out of date."""

from __future__ import annotations

from pathlib import Path

from app.tools.registry import page_labels_module

LABELS_FILE = Path(__file__).parents[1] / "static" / "tool-labels.js"


def main() -> None:
    LABELS_FILE.write_text(page_labels_module(), encoding="utf-8")
    print(f"wrote {LABELS_FILE}")


if __name__ == "__main__":
    main()
