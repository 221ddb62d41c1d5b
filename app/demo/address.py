"""A forgiving parser for addresses typed on one line:

    "123 Main St, Apt 4, Austin, TX, USA, 78701"   "123 Main St, Austin, TX 78701"

The zip code, the country and the state are recognised by their shape; the remaining parts
are, in order, the street line, an optional second line and the city.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

_ZIP = re.compile(r"^(?:\d{5}(?:-\d{4})?|\d{6})$")
_STATE_ZIP = re.compile(r"^([A-Za-z]{2})\s+(\d{5}(?:-\d{4})?)$")
_STATE = re.compile(r"^[A-Z]{2}$")
_COUNTRIES = {
    "usa": "USA",
    "us": "USA",
    "u.s.": "USA",
    "u.s.a.": "USA",
    "united states": "USA",
    "united states of america": "USA",
    "america": "USA",
    "美国": "USA",
    "canada": "Canada",
    "uk": "UK",
    "united kingdom": "UK",
    "china": "China",
    "中国": "China",
    "germany": "Germany",
    "france": "France",
    "mexico": "Mexico",
}
# Where the address starts in "change the address of #W1234567 to 123 Main St, ...".
_LEAD_IN = re.compile(r"(?:\bto\b|\bis\b|:|：|改成|改为|换成|变更为|更改为)\s*", re.I)
_STREET = re.compile(r"\d")
# What people put after an address: "..., 21201 instead?", "..., 78701 please."
_TRAILER = re.compile(r"(?:[\s,，]+(?:instead|please|thanks|thank you))*[\s.。?？!！]*$", re.I)

FIELDS = ("address1", "address2", "city", "state", "country", "zip")


@dataclass(frozen=True)
class ParsedAddress:
    address1: str = ""
    address2: str = ""
    city: str = ""
    state: str = ""
    country: str = ""
    zip: str = ""

    @property
    def missing(self) -> list[str]:
        return [f for f in FIELDS if f != "address2" and not getattr(self, f)]

    @property
    def complete(self) -> bool:
        return not self.missing

    def fields(self) -> dict[str, str]:
        return asdict(self)

    def one_line(self) -> str:
        parts = [self.address1, self.address2, self.city, f"{self.state} {self.zip}", self.country]
        return ", ".join(p.strip() for p in parts if p.strip())


def address_text(text: str) -> str:
    """The part of the message after its last lead-in ("... to 123 Main St, ...")."""
    starts = [m.end() for m in _LEAD_IN.finditer(text)]
    tail = text[starts[-1] :] if starts else text
    return _TRAILER.sub("", tail.strip())


def parse_address(text: str) -> ParsedAddress | None:
    """The fields found in `text`; None when it does not look like an address at all."""
    parts = [p.strip() for p in re.split(r"[,，;；\n]", address_text(text)) if p.strip()]
    if len(parts) < 2 or not any(_STREET.search(p) for p in parts):
        return None
    found: dict[str, str] = {}
    rest: list[str] = []
    for part in parts:
        state_zip = _STATE_ZIP.match(part)
        if state_zip and "zip" not in found:
            found["state"] = state_zip.group(1).upper()
            found["zip"] = state_zip.group(2)
        elif _ZIP.match(part) and "zip" not in found:
            found["zip"] = part
        elif part.lower() in _COUNTRIES and "country" not in found:
            found["country"] = _COUNTRIES[part.lower()]
        elif _STATE.match(part) and "state" not in found and rest:
            found["state"] = part
        else:
            rest.append(part)
    if len(rest) >= 3:
        found["address1"], found["address2"], found["city"] = rest[0], rest[1], ", ".join(rest[2:])
    elif len(rest) == 2:
        found["address1"], found["city"] = rest
    elif rest:
        found["address1"] = rest[0]
    us_zip = re.fullmatch(r"\d{5}(?:-\d{4})?", found.get("zip", ""))
    if "country" not in found and us_zip and _STATE.match(found.get("state", "")):
        found["country"] = "USA"  # a US state and a five-digit zip
    return ParsedAddress(**found)
