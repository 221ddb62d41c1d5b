"""`cs-agent policy ...` on a real database (issue 42): show a version as a file, create a
draft from an edited one, diff them, the gate's refusal and a forced publish, rollback."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from app.agent.prompts import POLICY
from app.cli import main as cli_main
from app.policies import files


@pytest.fixture
def database(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("DATABASE_URL", database_url)
    with psycopg.connect(database_url, autocommit=True) as conn, conn.transaction():
        conn.execute("DELETE FROM policy_moves")
        conn.execute("DELETE FROM policy_tests")
        conn.execute("DELETE FROM policy_events WHERE version > 1 OR actor <> 'migration'")
        conn.execute("DELETE FROM policy_versions WHERE version > 1")
        conn.execute("UPDATE policy_versions SET state = 'live', percent = NULL WHERE version = 1")
    return database_url


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    cli_main(["policy", *argv])
    return capsys.readouterr().out


def latest_version(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT max(version) FROM policy_versions").fetchone()
        assert row is not None
        return int(row[0])


class TestPolicyFiles:
    def test_a_file_round_trips_every_byte_and_procedures(self) -> None:
        version = {
            "version": 4,
            "state": "draft",
            "instructions": POLICY + "\n\n  trailing spaces  ",
            "procedures": [{"name": "Damaged", "when": "it broke", "steps": "1. a\n2. b\n"}],
            "note": "n: with a colon",
            "parent": 1,
        }
        parsed = files.parse(files.render(version))
        assert parsed.instructions == version["instructions"]
        assert parsed.procedures == version["procedures"]
        assert parsed.note == "n: with a colon" and parsed.parent == 1

    @pytest.mark.parametrize(
        "text,message",
        [
            ("no front matter", "starts with"),
            ("---\nnote: x\n", "closing"),
            ("---\nnote: [x\n---\nrules\n", "not valid YAML"),
            ("---\ncolour: red\n---\nrules\n", "unknown front matter key colour"),
            ("---\nprocedures:\n- name: x\n---\nrules\n", "exactly name, when and steps"),
            ("---\nnote: x\n---\n\n", "instructions"),
        ],
    )
    def test_a_bad_file_says_what_is_wrong(self, text: str, message: str) -> None:
        with pytest.raises(files.PolicyFileError, match=message):
            files.parse(text)


class TestPolicyCommand:
    def test_show_edit_create_diff_publish_and_rollback(
        self, database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        shown = run(capsys, "show", "1")
        assert shown.startswith("---\nversion: 1\nstate: live\n") and POLICY in shown
        edited = shown.replace("note: the rules shipped with cs-agent", "note: damaged parcels")
        edited = edited.replace(
            "procedures: []",
            "procedures:\n- name: Damaged parcel\n"
            "  when: a parcel arrives damaged\n  steps: Offer a replacement.",
        )
        path = tmp_path / "p.md"
        path.write_text(edited + "- Offer a replacement before a refund.\n")
        assert run(capsys, "create", str(path)).startswith("created draft version")
        new = latest_version(database)

        diff = run(capsys, "diff", "1", str(new))
        assert "+- Offer a replacement before a refund." in diff
        assert "+note: damaged parcels" in diff and "+- name: Damaged parcel" in diff
        listed = run(capsys, "list")
        assert f"| {new} | draft |" in listed and "| 1 | live |" in listed

        with pytest.raises(SystemExit) as refused:
            cli_main(["policy", "publish", str(new), "--percent", "20"])
        assert refused.value.code == 2
        assert "gate_not_passed" in capsys.readouterr().err
        with pytest.raises(SystemExit):
            cli_main(["policy", "publish", str(new), "--percent", "20", "--force"])
        assert "--reason" in capsys.readouterr().err
        out = run(capsys, "publish", str(new), "--percent", "20", "--force", "--reason", "urgent")
        assert out.strip() == f"version {new} is candidate at 20%"
        with psycopg.connect(database) as conn:
            event = conn.execute(
                "SELECT actor, forced, reason FROM policy_events WHERE version = %s"
                " AND action = 'candidate'",
                (new,),
            ).fetchone()
        assert event is not None and event[0].startswith("cli") and event[1:] == (True, "urgent")
        assert run(capsys, "rollback").strip() == f"version {new} retired; version 1 is live"

    def test_an_unknown_version_is_one_line(
        self, database: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        with pytest.raises(SystemExit):
            cli_main(["policy", "show", "999"])
        assert capsys.readouterr().err.strip() == "error: policy_not_found: no policy version 999"
