"""Every test under tests/scale/ gets the `scale` marker; a failing one's report carries the
tail of each live process's log (as tests/faults/ does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.faults import procs

SCALE_DIR = Path(__file__).resolve().parent


def _here(item: pytest.Item) -> bool:
    return SCALE_DIR in Path(str(item.fspath)).resolve().parents


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _here(item):
            item.add_marker(pytest.mark.scale)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed and _here(item):
        for proc in procs.live():
            report.sections.append((f"log of {proc.name}", proc.log()))
    return report
