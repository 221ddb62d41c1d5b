"""A policy version's text as the system prompt carries it.

The rules are the version's instructions, then its procedures. The identity line stays in
code (it depends on who is talking): it goes where the instructions say `{identity}`, or
after them when they do not say it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

IDENTITY_MARK = "{identity}"
PROCEDURES_HEADING = "Procedures: when one of these situations arises, follow its steps."


def rules_text(instructions: str, procedures: Sequence[Mapping[str, Any]]) -> str:
    """The rules of a version, the identity mark kept. A version without procedures reads
    exactly as its instructions (version 1 as the shipped rules, byte for byte)."""
    if not procedures:
        return instructions
    parts = [instructions, PROCEDURES_HEADING]
    for procedure in procedures:
        parts.append(
            f"### {procedure['name']}\nWhen: {procedure['when']}\n{str(procedure['steps']).strip()}"
        )
    return "\n".join(parts)


def with_identity(rules: str, identity: str) -> str:
    if IDENTITY_MARK in rules:
        return rules.replace(IDENTITY_MARK, identity)
    return f"{rules}\n{identity}"
