"""The README as a new user follows it: `serve` prints the lines the README shows, the
"Try it" block runs as written against it, the pages it names answer, the demo orders it
lists are pending, `make demo-reset`'s command puts a cancelled one back, and a busy port
says what to do. Commands and paths are read from README.md, not copied here."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.integration.test_cli_serve import free_port
from tests.pg import create_fresh_database, drop_database

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
README_PORT = "8000"


def block_after(marker: str) -> str:
    """The first fenced code block after the line holding `marker`."""
    start = README.index(marker)
    match = re.search(r"```[a-z]*\n(.*?)```", README[start:], re.S)
    assert match, f"no code block after {marker!r}"
    return match.group(1)


@dataclass
class Served:
    url: str
    port: int
    database_url: str
    stdout: Path
    proc: subprocess.Popen[bytes]


def serve(database_url: str, port: int, out: Path, err: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DATABASE_URL": database_url, "LOG_LEVEL": "WARNING"}
    with out.open("wb") as stdout, err.open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--port", str(port), "--workers", "1"],
            env=env,
            cwd=ROOT,
            stdout=stdout,
            stderr=stderr,
        )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`python -m app serve` on an empty database, as `make run` starts it (it loads the
    demo shop)."""
    url, admin = create_fresh_database("csagent_readme")
    tmp = tmp_path_factory.mktemp("readme")
    port = free_port()
    proc = serve(url, port, tmp / "out.txt", tmp / "err.txt")
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp / "err.txt").read_text()
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        yield Served(base, port, url, tmp / "out.txt", proc)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        drop_database(admin, url)


def order_status(database_url: str, order_id: str) -> tuple[str, str]:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT customer_id, status FROM orders WHERE id = %s", (order_id,)
        ).fetchone()
    assert row is not None, order_id
    return str(row[0]), str(row[1])


class TestQuickStart:
    def test_serve_prints_the_lines_the_readme_shows(self, served: Served) -> None:
        shown = block_after("prints where everything is").strip().splitlines()
        printed = served.stdout.read_text()
        for line in shown[1:]:  # the first names the workers, which differ
            assert line.replace(README_PORT, str(served.port)) in printed, (line, printed)
        assert f"cs-agent serving on {served.url}" in printed

    def test_the_pages_it_names_answer(self, served: Served) -> None:
        shown = block_after("prints where everything is")
        paths = re.findall(rf"http://127\.0\.0\.1:{README_PORT}(/\S*)", shown)
        assert {"/", "/console", "/console/analytics", "/docs"} <= set(paths)
        for path in paths:
            answer = httpx.get(served.url + path, timeout=10)
            assert answer.status_code == 200, path

    def test_the_listed_demo_orders_are_pending_and_the_customers_own(self, served: Served) -> None:
        table = README[README.index("| customer | pending orders |") :].split("\n\n")[0]
        rows = re.findall(r"^\| `(\w+)` \| (.+) \|$", table, re.M)
        assert len(rows) >= 5
        for customer, orders in rows:
            for order in re.findall(r"#W\d+", orders):
                assert order_status(served.database_url, order) == (customer, "pending")


class TestTryIt:
    def test_the_block_runs_as_written(self, served: Served) -> None:
        script = block_after("## Try it").replace(
            f"127.0.0.1:{README_PORT}", f"127.0.0.1:{served.port}"
        )
        ran = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

        assert ran.returncode == 0, ran.stderr
        out = ran.stdout
        assert "event: token" in out and "event: done" in out  # the SSE answer
        assert '"status":"interrupted"' in out and "Cancel order #W6295317" in out
        assert "Declined" in out or "didn't change anything" in out
        assert '"checkpoints"' in out or '"items"' in out  # the history page
        last = out.strip().splitlines()[-1]  # the rewind: back to before the first message
        assert '"messages":[]' in last.replace(" ", ""), last
        assert order_status(served.database_url, "#W6295317")[1] == "pending"


class TestDemoReset:
    def test_the_reset_command_puts_a_cancelled_order_back(self, served: Served) -> None:
        command = re.search(r"`make demo-reset` puts .*?\(`([^`]+)`", README, re.S)
        assert command, "the README names demo-reset's command"
        with psycopg.connect(served.database_url, autocommit=True) as conn:
            conn.execute("UPDATE orders SET status = 'cancelled' WHERE id = '#W6295317'")
        args = command.group(1).split()
        assert args[:3] == ["python", "-m", "app"]
        env = {**os.environ, "DATABASE_URL": served.database_url}
        subprocess.run([sys.executable, *args[1:]], cwd=ROOT, env=env, check=True, timeout=120)
        assert order_status(served.database_url, "#W6295317")[1] == "pending"
        makefile = (ROOT / "Makefile").read_text()
        assert re.search(r"^demo-reset:.*\n\t\$\(PY\) -m app seed --replace$", makefile, re.M)


class TestBusyPort:
    def test_a_taken_port_says_how_to_choose_another(self, served: Served, tmp_path: Path) -> None:
        proc = serve(served.database_url, served.port, tmp_path / "o", tmp_path / "e")
        assert proc.wait(timeout=60) != 0
        said = (tmp_path / "e").read_text()
        assert f"make run PORT={served.port + 1}" in said and "Traceback" not in said
        makefile = (ROOT / "Makefile").read_text()
        assert "$(if $(PORT),--port $(PORT))" in makefile


class TestQuietEmbeddedPostgres:
    def test_no_runtime_dir_warning_and_no_pg_ctl_dump(self, tmp_path: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
        code = (
            "from app.db.embedded import start_embedded; import psycopg; "
            f"psycopg.connect(start_embedded({str(tmp_path)!r})).close()"
        )
        ran = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
        assert ran.returncode == 0, ran.stderr
        said = ran.stdout + ran.stderr
        assert "XDG_RUNTIME_DIR" not in said and "Running commandline" not in said, said


class TestPythonSdkExample:
    def test_the_docs_python_example_runs_as_written(self, served: Served) -> None:
        docs = (ROOT / "docs" / "langgraph-api.md").read_text()
        start = docs.index("**Python**")
        match = re.search(r"```python\n(.*?)```", docs[start:], re.S)
        assert match, "docs/langgraph-api.md has the Python example"
        script = match.group(1).replace(f"127.0.0.1:{README_PORT}", f"127.0.0.1:{served.port}")
        ran = subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
        )

        assert ran.returncode == 0, ran.stderr
        assert "waiting for: Cancel order #W6295317" in ran.stdout, ran.stdout
        assert "didn't change anything" in ran.stdout
        assert order_status(served.database_url, "#W6295317")[1] == "pending"
