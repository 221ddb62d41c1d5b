"""Consistent fakes for the personal data in a recorded task file, which leaves the database.

Names, emails, user ids and the street, second line, city and zip of every address are
replaced. One `Fakes` serves a whole file, so a value maps to the same fake wherever it
appears: in a customer's record, an order's address, a write's arguments and what the
customer typed (where it is replaced as words, longest first). A fake is drawn from a
keyed hash of the real value (a fresh key per recording, so the fakes cannot be reversed
by hashing guesses) and is never the fake of another value. States and countries stay.

Known gap: personal data a customer types that is in no record (a phone number, another
person's name) is not recognised, except email addresses, which are all replaced.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


FIRST = _words(
    "Alex Blair Casey Dana Eli Frankie Gale Harper Indra Jules Kai Lee Morgan Noor Oakley "
    "Parker Quinn Reese Sasha Tatum Uma Val Wren Yael Zuri Ari Bo Cy Dell Emery Finley "
    "Gray Hollis Ira Joss Kit Lane Marlo Nico Onyx"
)
LAST = _words(
    "Abbott Barlow Carver Dorsey Ellison Fairley Garland Holt Iverson Jarvis Kessler "
    "Lowry Mercer Nolan Orton Pryor Quill Radley Sutter Thorne Upton Vance Whitlock "
    "Yardley Zeller Ashby Brennan Colter Delaney Everly Frost Grier Hale Ingram Keane "
    "Lyle Marsh Norwood"
)
STREETS = _words(
    "Alder Birch Cedar Dogwood Elm Fir Gum Hazel Ironwood Juniper Kapok Larch Maple "
    "Nutmeg Oak Pine Quince Rowan Spruce Teak Umber Walnut Yew"
)
STREET_KINDS = ("Street", "Avenue", "Lane", "Road", "Court", "Way", "Drive")
CITIES = _words(
    "Fairhaven Brookfield Millbrook Westvale Eastwood Northport Southgate Riverton "
    "Lakeside Hillcrest Oakmont Pinecrest Stonebridge Clearwater Ashford Greenfield "
    "Maplewood Redford"
)
EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


@dataclass
class Fakes:
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    _by_kind: dict[str, dict[str, str]] = field(default_factory=dict)  # kind -> real -> fake
    _words: dict[str, str] = field(default_factory=dict)  # real (lower) -> fake, for text
    _pattern: re.Pattern[str] | None = None

    # -- values -----------------------------------------------------------------------------

    def first_name(self, real: str) -> str:
        return self._fake("first", real, lambda n: FIRST[n % len(FIRST)], len(FIRST))

    def last_name(self, real: str) -> str:
        return self._fake("last", real, lambda n: LAST[n % len(LAST)], len(LAST))

    def email(self, real: str) -> str:
        return self._fake(
            "email", real.lower(), lambda n: f"customer.{n % 900_000 + 100_000}@example.com"
        )

    def user_id(self, real: str, first: str, last: str) -> str:
        """A tau-bench style id (`first_last_1234`) made of the fake names."""
        base = f"{self.first_name(first)}_{self.last_name(last)}".lower()
        return self._fake("user", real, lambda n: f"{base}_{n % 9000 + 1000}")

    def street(self, real: str) -> str:
        def draw(n: int) -> str:
            name, kind = STREETS[n % len(STREETS)], STREET_KINDS[(n // 97) % len(STREET_KINDS)]
            return f"{n % 9890 + 110} {name} {kind}"

        return self._fake("street", real, draw)

    def second_line(self, real: str) -> str:
        if not real:
            return real
        return self._fake("line2", real, lambda n: f"Suite {n % 900 + 100}")

    def city(self, real: str) -> str:
        return self._fake("city", real, lambda n: CITIES[n % len(CITIES)], len(CITIES))

    def zip(self, real: str) -> str:
        return self._fake("zip", real, lambda n: f"{n % 90_000 + 10_000}")

    def address(self, address: dict[str, Any]) -> dict[str, Any]:
        """A tau-bench address object (or a write's address arguments) with its personal
        fields faked."""
        fakers: dict[str, Callable[[str], str]] = {
            "address1": self.street,
            "address2": self.second_line,
            "city": self.city,
            "zip": self.zip,
        }
        return {
            k: fakers[k](v) if k in fakers and isinstance(v, str) else v for k, v in address.items()
        }

    # -- text -------------------------------------------------------------------------------

    def text(self, value: str) -> str:
        """Free text with every known personal value replaced, and every email address. One
        pass, so a fake is never replaced again."""
        if self._pattern is None:
            words = sorted(self._words, key=len, reverse=True)
            known = "".join(f"|{re.escape(w)}" for w in words)
            self._pattern = re.compile(
                rf"(?P<email>{EMAIL.pattern})|(?<!\w)(?:(?!x)x{known})(?!\w)", re.IGNORECASE
            )
        return self._pattern.sub(self._replace, value)

    def _replace(self, match: re.Match[str]) -> str:
        found = match.group(0)
        if match.group("email") is not None:
            return self.email(found)
        return _same_case(found, self._words[found.lower()])

    # -- drawing ----------------------------------------------------------------------------

    def _fake(
        self, kind: str, real: str, draw: Callable[[int], str], choices: int | None = None
    ) -> str:
        known = self._by_kind.setdefault(kind, {})
        if real in known:
            return known[real]
        taken = set(known.values())
        digest = hmac.new(self.key, f"{kind}\0{real}".encode(), hashlib.sha256).digest()
        n = int.from_bytes(digest[:8], "big")
        fake = draw(n)
        tries = 1
        # a small list runs out: then a number tells two fakes apart
        while fake in taken or fake.lower() == real.lower():
            fake = draw(n + tries) if choices is None or tries < choices else f"{draw(n)}{tries}"
            tries += 1
        known[real] = fake
        if len(real) >= 2:
            self._words[real.lower()] = fake
            self._pattern = None
        return fake


def _same_case(found: str, fake: str) -> str:
    if found.isupper() and len(found) > 1:
        return fake.upper()
    if found.islower():
        return fake.lower()
    return fake
