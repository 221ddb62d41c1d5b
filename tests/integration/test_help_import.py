"""`cs-agent help import DIR | export DIR` (issue 42): a company's own help centre replaces
the shipped one and survives a start; `--shipped` brings the shipped one back."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from app.cli import main as cli_main
from app.config import Settings
from app.db.pool import open_pool
from app.help.articles import shipped_articles
from app.help.repository import sync_help_articles

ACME = """# Returns at Acme
updated: 2026-12-01

Acme takes returns for 60 days.
- Print the label from your account.
"""


@pytest.fixture
def database(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("DATABASE_URL", database_url)
    yield database_url
    # the other tests expect the shipped help centre
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DELETE FROM help_source")
    cli_main(["help", "import", "--shipped"])


def ids(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM help_articles ORDER BY id")]


async def start_sync(url: str) -> None:
    """What every start does after migrating (app/cli.py `_prepare`)."""
    settings = Settings(database_url=url, _env_file=None)  # type: ignore[call-arg]
    pool = await open_pool(url, settings, name="t")
    try:
        await sync_help_articles(pool)
    finally:
        await pool.close()


class TestHelpImportExport:
    def test_import_replaces_survives_a_start_and_shipped_comes_back(
        self, database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        cli_main(["help", "import", "--shipped"])
        shipped = [a.id for a in shipped_articles()]
        assert ids(database) == shipped

        exported = tmp_path / "out"
        cli_main(["help", "export", str(exported)])
        assert sorted(p.stem for p in exported.glob("*.md")) == shipped
        refund = next(a for a in shipped_articles() if a.id == "refund-timing")
        again = (exported / "refund-timing.md").read_text()
        assert again.startswith(f"# {refund.title}\n") and refund.body in again

        own = tmp_path / "acme"
        own.mkdir()
        (own / "acme-returns.md").write_text(ACME)
        capsys.readouterr()
        cli_main(["help", "import", str(own)])
        assert "1 articles" in capsys.readouterr().out
        assert ids(database) == ["acme-returns"]
        asyncio.run(start_sync(database))
        assert ids(database) == ["acme-returns"]  # a start leaves a company's own alone

        cli_main(["help", "import", "--shipped"])
        assert ids(database) == shipped

    def test_a_bad_article_is_one_line_and_changes_nothing(
        self, database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        cli_main(["help", "import", "--shipped"])
        before = ids(database)
        bad = tmp_path / "bad"
        bad.mkdir()
        (bad / "ok-one.md").write_text(ACME)
        (bad / "Not_A_Slug.md").write_text(ACME)
        with pytest.raises(SystemExit):
            cli_main(["help", "import", str(bad)])
        assert "is not a lowercase slug" in capsys.readouterr().err
        assert ids(database) == before
