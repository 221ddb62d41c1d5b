""".env.example documents every setting: a new field of `Settings` needs its line there."""

from __future__ import annotations

import re
from pathlib import Path

from dotenv import dotenv_values

import app
from app.config import Settings

EXAMPLE = Path(app.__file__).parent.parent / ".env.example"
# `NAME=value` or `# NAME=value`: a commented-out line still documents its setting.
ASSIGNMENT = re.compile(r"^(#\s*)?([A-Z][A-Z0-9_]*)=", re.MULTILINE)


def env_names() -> set[str]:
    """The environment name of every setting (pydantic-settings: the field name, any case)."""
    return {
        (field.validation_alias if isinstance(field.validation_alias, str) else name).upper()
        for name, field in Settings.model_fields.items()
    }


def example_lines() -> list[tuple[bool, str]]:
    """(commented out, name) for each assignment in .env.example."""
    text = EXAMPLE.read_text()
    return [(bool(m.group(1)), m.group(2)) for m in ASSIGNMENT.finditer(text)]


class TestEnvExample:
    def test_every_setting_has_a_line(self) -> None:
        documented = {name for _, name in example_lines()}
        missing = sorted(env_names() - documented)
        assert not missing, f"settings without a line in .env.example: {missing}"

    def test_every_active_line_names_a_setting(self) -> None:
        # Settings ignore unknown names, so a misspelt line would be dropped silently.
        active = {name for commented, name in example_lines() if not commented}
        unknown = sorted(active - env_names())
        assert not unknown, f"active lines in .env.example that no setting reads: {unknown}"

    def test_the_example_values_are_valid_settings(self) -> None:
        values = {k.lower(): v for k, v in dotenv_values(EXAMPLE).items() if v is not None}
        # A value no field accepts raises here (a ValidationError names the setting).
        settings = Settings(_env_file=None, **values)  # type: ignore[arg-type]
        assert settings.app_env == values["app_env"]
