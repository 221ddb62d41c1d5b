"""A policy version as a file: markdown with YAML front matter.

    ---
    version: 3              # shown by `policy show`; ignored by `policy create`
    state: live             # likewise (and percent, created_by, created_at)
    parent: 2
    note: damaged parcels get a replacement first
    procedures:
    - name: Damaged parcel
      when: the customer says a parcel arrived damaged
      steps: |
        1. Ask for a photo.
        2. ...
    ---
    You are the customer-service agent of an online shop. ...

The body is the instructions, exactly: `show 1 > p.md`, edit, `create p.md` keeps every
byte you did not change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

FENCE = "---\n"
SHOWN_ONLY = ("version", "state", "percent", "created_by", "created_at")
KEYS = (*SHOWN_ONLY, "parent", "note", "procedures")
PROCEDURE_KEYS = ("name", "when", "steps")


class PolicyFileError(ValueError):
    """A policy file that cannot be read; the message says where."""


@dataclass(frozen=True)
class PolicyFile:
    instructions: str
    procedures: list[dict[str, str]] = field(default_factory=list)
    note: str = ""
    parent: int | None = None


class _Dumper(yaml.SafeDumper):  # type: ignore[misc]  # (no stubs: Any)
    pass


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def render(version: dict[str, Any]) -> str:
    meta = {k: version.get(k) for k in SHOWN_ONLY if version.get(k) is not None}
    meta["created_at"] = str(meta["created_at"]) if "created_at" in meta else None
    meta = {k: v for k, v in meta.items() if v is not None}
    meta["parent"] = version.get("parent")
    meta["note"] = version.get("note") or ""
    meta["procedures"] = [
        {k: str(p.get(k, "")) for k in PROCEDURE_KEYS} for p in version.get("procedures") or []
    ]
    front = yaml.dump(meta, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
    return f"{FENCE}{front}{FENCE}{version['instructions']}\n"


def parse(text: str) -> PolicyFile:
    if not text.startswith(FENCE):
        raise PolicyFileError("a policy file starts with '---' and its YAML front matter")
    end = text.find("\n" + FENCE, len(FENCE) - 1)
    if end < 0:
        raise PolicyFileError("the front matter has no closing '---' line")
    try:
        meta = yaml.safe_load(text[len(FENCE) : end + 1]) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        raise PolicyFileError(f"the front matter is not valid YAML{where}") from None
    if not isinstance(meta, dict):
        raise PolicyFileError("the front matter must be a mapping of keys to values")
    unknown = sorted(set(meta) - set(KEYS))
    if unknown:
        raise PolicyFileError(f"unknown front matter key {', '.join(map(str, unknown))}")
    body = text[end + 1 + len(FENCE) :]
    instructions = body[:-1] if body.endswith("\n") else body
    if not instructions.strip():
        raise PolicyFileError("the instructions (the text after the front matter) are empty")
    parent = meta.get("parent")
    if parent is not None and (isinstance(parent, bool) or not isinstance(parent, int)):
        raise PolicyFileError("parent must be a version number")
    return PolicyFile(
        instructions=instructions,
        procedures=_procedures(meta.get("procedures")),
        note=str(meta.get("note") or ""),
        parent=parent,
    )


def _procedures(raw: object) -> list[dict[str, str]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise PolicyFileError("procedures must be a list of {name, when, steps}")
    procedures = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or set(item) != set(PROCEDURE_KEYS):
            raise PolicyFileError(f"procedures[{index}] must have exactly name, when and steps")
        empty = [k for k in PROCEDURE_KEYS if not str(item[k] or "").strip()]
        if empty:
            raise PolicyFileError(f"procedures[{index}]: {', '.join(empty)} must not be empty")
        procedures.append({k: str(item[k]) for k in PROCEDURE_KEYS})
    return procedures
