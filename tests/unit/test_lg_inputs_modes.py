"""The join route's stream modes, as the document states them, are the modes it sends."""

from __future__ import annotations

from typing import get_args

from app.api.lg.runs import JoinMode
from app.api.lg.translate import MODES


def test_the_join_modes_are_the_modes_sent() -> None:
    assert set(get_args(JoinMode)) - {""} == set(MODES)
