"""The collector settings a serving process applies once it has started."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from app.config import Settings
from app.gc_tuning import tune_for_serving


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_freezes_the_heap_and_raises_the_first_threshold(restored_gc: None) -> None:
    _, gen1, gen2 = gc.get_threshold()
    tune_for_serving(10_000)
    assert gc.get_threshold() == (10_000, gen1, gen2)
    assert gc.get_freeze_count() > 0


def test_zero_leaves_python_defaults(restored_gc: None) -> None:
    before = gc.get_threshold()
    tune_for_serving(0)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_the_default_setting_tunes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GC_GEN0_THRESHOLD", raising=False)
    assert Settings(_env_file=None).gc_gen0_threshold == 10_000  # type: ignore[call-arg]
    monkeypatch.setenv("GC_GEN0_THRESHOLD", "0")
    assert Settings(_env_file=None).gc_gen0_threshold == 0  # type: ignore[call-arg]
